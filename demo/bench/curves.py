"""The acceptance curve by position in the benchmark (demo.core.acceptance): per sample in
the JSON, pooled per configuration and prompt class (counts added, not rates averaged), and
as the plot's third panel. Kept apart from measure.py and plot.py, which draw on it."""

from __future__ import annotations

from typing import Optional

from ..core.acceptance import AcceptanceCurve, curve_of_chunks, pooled
from ..core.streaming import SPECULATIVE
from .plan import METHOD_LABELS


def sample_curve(result, k: int) -> Optional[dict]:
    """One speculative run's curve (its RunResult's chunks), as the JSON holds it in the sample's speculative side."""
    curve = curve_of_chunks(result.chunks, k)
    return None if curve is None else curve.as_dict()


def _pooled(samples: list) -> Optional[dict]:
    curves = [AcceptanceCurve.from_dict(s[SPECULATIVE]["acceptance_by_position"]) for s in samples
              if s.get("speedup") is not None and s[SPECULATIVE].get("acceptance_by_position")]
    curve = pooled(curves)
    return None if curve is None else curve.as_dict()


def add_curves(aggregates: list, samples: list) -> list:
    """Each aggregate (demo.bench.report.aggregate) with its pooled curve, overall and per class."""
    for agg in aggregates:
        mine = [s for s in samples if (s.get("weights", "preset"), s["mode"], s["method"], s["assistant_tokens"])
                == (agg["weights"], agg["mode"], agg["method"], agg["assistant_tokens"])]
        agg["overall"]["acceptance_by_position"] = _pooled(mine)
        for cls, stats in agg["classes"].items():
            stats["acceptance_by_position"] = _pooled([s for s in mine if s["class"] == cls])
    return aggregates


def plot_curves(ax, result) -> None:
    """Rate at which guess i was kept, given the ones before it were, per configuration of
    a BenchResult (demo.bench.result)."""
    drawn = 0
    for agg in result.aggregates:
        curve = agg.overall.acceptance_by_position
        if not curve or not any(r is not None for r in curve["rate"]):
            continue
        xs = [i + 1 for i, r in enumerate(curve["rate"]) if r is not None]
        ys = [r for r in curve["rate"] if r is not None]
        label = f"{agg.mode} {METHOD_LABELS.get(agg.method, agg.method)} K={agg.assistant_tokens}"
        if agg.weights != "preset":
            label = f"{agg.weights} {label}"
        ax.plot(xs, ys, marker="o", linestyle="--" if agg.method == "prompt_lookup" else "-", label=label)
        drawn += 1
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # positions are whole guesses
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("guess position")
    ax.set_ylabel("kept, given the guesses before it were")
    ax.set_title("acceptance by position (last step censored)")
    if drawn:
        ax.legend(fontsize="x-small")
    else:
        ax.text(0.5, 0.5, "no speculative steps", ha="center", va="center", transform=ax.transAxes)
