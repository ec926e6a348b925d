"""The benchmark's plot (write_plot): median speedup vs K per prompt class, or tok/s per
weight-format pair in a format sweep; mean tok/s per mode; acceptance by position (curves.py).
"""

from __future__ import annotations

from pathlib import Path

from ..core.bench_prompts import CLASSES
from .curves import plot_curves
from .plan import METHOD_LABELS
from .report import describe
from .result import BenchResult


def _plot_classes(left, aggs, modes, methods) -> None:
    """Median speedup vs K, one line per prompt class (and method, and mode)."""
    colors = {c: f"C{i}" for i, c in enumerate(list(CLASSES) + ["all"])}
    styles = {"draft": "-", "eagle3": "-.", "prompt_lookup": "--", "free_draft": ":"}
    markers = {"fair": "o", "race": "s"}
    for mode in modes:
        for method in methods:
            series = sorted((a for a in aggs if a.mode == mode and a.method == method),
                            key=lambda a: a.assistant_tokens)
            classes = list(dict.fromkeys(c for a in series for c in a.classes))
            for cls in classes:
                xs, ys = [], []
                for a in series:
                    st = a.classes.get(cls)
                    if st and st.speedup:
                        xs.append(a.assistant_tokens)
                        ys.append(st.speedup.median)
                if not xs:
                    continue
                label = cls
                if len(methods) > 1 or method != "draft":
                    label += f", {METHOD_LABELS[method]}"
                if len(modes) > 1:
                    label += f" ({mode})"
                left.plot(xs, ys, styles[method], marker=markers.get(mode, "o"),
                          color=colors.get(cls, "C9"), label=label)
    left.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
    left.set_ylabel("median speedup (speculative ÷ baseline tok/s)")
    left.set_title("median speedup by prompt class")


def _plot_formats(ax, aggs, weights, modes) -> None:
    """A sweep over weight formats: speculative tok/s vs K, one line per format pair, and
    each main format's own speed alone as a dotted level to beat."""
    alone: dict = {}
    for i, w in enumerate(weights):
        for mode in modes:
            series = sorted((a for a in aggs if a.weights == w and a.mode == mode and a.method in ("draft", "eagle3")),
                            key=lambda a: a.assistant_tokens)
            if not series:
                continue
            ax.plot([a.assistant_tokens for a in series],
                    [a.overall.speculative_tokens_per_s.mean for a in series],
                    "-" if mode != "race" else "--", marker="o", color=f"C{i}",
                    label=w + (f" ({mode})" if len(modes) > 1 else ""))
            main = w.split("/")[0]
            alone.setdefault((main, mode), []).extend(a.overall.baseline_tokens_per_s.mean for a in series)
    for j, ((main, mode), values) in enumerate(sorted(alone.items())):
        level = sum(values) / len(values)
        ax.axhline(level, color="grey", linestyle=":", linewidth=0.9)
        ax.annotate(f"{main} alone{f' ({mode})' if len(modes) > 1 else ''}", (ax.get_xlim()[0], level),
                    fontsize="x-small", color="grey", va="bottom")
    ax.set_ylabel("speculative tokens/s (mean over prompts)")
    ax.set_title("formats × K (dotted: the main model alone)")


def write_plot(result: BenchResult, path: Path) -> None:
    """Median speedup vs K per prompt class; mean tok/s per mode; acceptance by position (curves.py)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    aggs = result.aggregates
    modes = list(dict.fromkeys(a.mode for a in aggs))
    methods = list(dict.fromkeys(a.method for a in aggs))
    fig, (left, right, by_position) = plt.subplots(1, 3, figsize=(17, 4.8))
    fig.suptitle(f"Speculative decoding on {result.preset['name']} "
                 f"({result.settings['max_new_tokens']} new tokens"
                 f"{', interrupted' if result.interrupted else ''})")

    weights = list(dict.fromkeys(a.weights for a in aggs if a.weights))
    if len(weights) > 1:
        _plot_formats(left, aggs, weights, modes)
    else:
        _plot_classes(left, aggs, modes, methods)
    left.set_xlabel("assistant tokens (K)")
    ks = sorted({a.assistant_tokens for a in aggs})
    if ks:
        left.set_xticks(ks)
    if left.get_legend_handles_labels()[0]:
        left.legend(fontsize="small")
    plot_curves(by_position, result)
    groups = [("baseline", None, "baseline_tokens_per_s")] + [
        (f"speculative ({METHOD_LABELS[m]})", m, "speculative_tokens_per_s") for m in methods
    ]
    width = 0.8 / max(len(groups), 1)
    for gi, (name, method, field) in enumerate(groups):
        means, stds = [], []
        for mode in modes:
            values = [
                (s.baseline if field.startswith("baseline") else s.speculative).tokens_per_s
                for s in result.samples
                if s.mode == mode and s.speedup is not None and (method is None or s.method == method)
            ]
            d = describe(values)
            means.append(d["mean"] if d else 0.0)
            stds.append(d["std"] if d else 0.0)
        xs = [i + (gi - (len(groups) - 1) / 2) * width for i in range(len(modes))]
        right.bar(xs, means, width, yerr=stds, capsize=3, label=name)
    right.set_xticks(range(len(modes)), modes)
    right.set_ylabel("mean tokens/s (± std, all K and prompts)")
    right.set_title("throughput per mode")
    if modes:
        right.legend(fontsize="small")
    else:
        for ax in (left, right):
            ax.text(0.5, 0.5, "no samples", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
