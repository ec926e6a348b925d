"""The benchmark's numbers: statistics per configuration, prompt class and prompt
(aggregate, over the samples as measure.py builds them), the plain-text table
(format_table) and the JSON file (write_json) of a finished BenchResult.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Iterable, Optional

from ..core.files import write_atomic
from ..core.streaming import BASELINE, SPECULATIVE
from .plan import METHOD_LABELS
from .result import BenchResult, Stats

METRICS = {
    "baseline_tokens_per_s": lambda s: s[BASELINE]["tokens_per_s"],
    "speculative_tokens_per_s": lambda s: s[SPECULATIVE]["tokens_per_s"],
    "baseline_ttft_s": lambda s: s[BASELINE]["ttft_s"],
    "speculative_ttft_s": lambda s: s[SPECULATIVE]["ttft_s"],
    "acceptance_rate": lambda s: s["acceptance_rate"],
    "tokens_per_step": lambda s: s[SPECULATIVE]["tokens_per_step"],
    "speedup": lambda s: s["speedup"],
}


def describe(values: Iterable[Optional[float]]) -> Optional[dict]:
    """mean, sample std (0 for one value), median, min, max and n of the values that exist."""
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return None
    return {
        "mean": statistics.fmean(xs),
        "std": statistics.stdev(xs) if len(xs) > 1 else 0.0,
        "median": statistics.median(xs),
        "min": min(xs),
        "max": max(xs),
        "n": len(xs),
    }


def _group_stats(samples: list[dict]) -> dict:
    good = [s for s in samples if s["speedup"] is not None]
    stats: dict = {"samples": len(samples), "failed": len(samples) - len(good)}
    for name, get in METRICS.items():
        stats[name] = describe(get(s) for s in good)
    verdicts = [s["verdict"] for s in good]
    stats["identical"] = sum(v == "identical" for v in verdicts)
    return stats


def aggregate(samples: list[dict]) -> list[dict]:
    """Per configuration: overall, per prompt class and per prompt statistics."""
    out = []
    def key(s: dict) -> tuple:
        return s.get("weights", "preset"), s["mode"], s["method"], s["assistant_tokens"]

    for weights, mode, method, k in list(dict.fromkeys(key(s) for s in samples)):
        of_config = [s for s in samples if key(s) == (weights, mode, method, k)]
        classes = list(dict.fromkeys(s["class"] for s in of_config))
        prompt_ids = list(dict.fromkeys(s["prompt_id"] for s in of_config))
        out.append({
            "weights": weights,
            "mode": mode,
            "method": method,
            "assistant_tokens": k,
            "overall": _group_stats(of_config),
            "classes": {c: _group_stats([s for s in of_config if s["class"] == c]) for c in classes},
            "prompts": {
                p: {"class": next(s["class"] for s in of_config if s["prompt_id"] == p),
                    **_group_stats([s for s in of_config if s["prompt_id"] == p])}
                for p in prompt_ids
            },
        })
    return out


def _pm(d: Optional[Stats], fmt: str, scale: float = 1.0) -> str:
    if not d:
        return "-"
    return f"{d.mean * scale:{fmt}} ± {d.std * scale:{fmt}}"


def _one(d: Optional[Stats], fmt: str, key: str = "mean") -> str:
    return f"{getattr(d, key):{fmt}}" if d else "-"


def format_table(result: BenchResult) -> str:
    """A short aligned plain-text table: one row per configuration and prompt class, plus 'all'."""
    header = ["mode", "method", "K", "class", "n", "baseline tok/s", "spec tok/s",
              "TTFT base ms", "TTFT spec ms", "accept", "tok/step", "speedup", "median", "weights"]
    rows = []
    for agg in result.aggregates:
        groups = list(agg.classes.items())
        if len(groups) > 1 or not groups:
            groups.append(("all", agg.overall))
        for name, st in groups:
            rows.append([
                agg.mode, METHOD_LABELS.get(agg.method, agg.method), str(agg.assistant_tokens),
                name, str(st.samples - st.failed),
                _pm(st.baseline_tokens_per_s, ".1f"), _pm(st.speculative_tokens_per_s, ".1f"),
                _pm(st.baseline_ttft_s, ".0f", 1000), _pm(st.speculative_ttft_s, ".0f", 1000),
                _one(st.acceptance_rate, ".2f"), _one(st.tokens_per_step, ".2f"),
                _pm(st.speedup, ".2f"), _one(st.speedup, ".2f", "median"), agg.weights,
            ])
    right = {2, 4, 5, 6, 7, 8, 9, 10, 11, 12}
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    m, v, settings = result.machine, result.versions, result.settings
    out = [
        f"preset {result.preset['name']}; {settings['max_new_tokens']} new tokens, "
        f"{settings['repeat']} repeat(s), greedy{', exact (f32)' if settings['exact'] else ''}"
        + (f"; EAGLE-3 tree: branching factor {tree['branching_factor']}, depth {tree['tree_depth']}"
           if (tree := settings.get("tree")) else ""),
        f"{m['cpu_model']}, {m['cores']} cores ({' '.join(m['isa_flags']) or 'no ISA flags found'}); "
        f"openvino {v.get('openvino')}, openvino_genai {v.get('openvino_genai')}",
        line(header),
        line(["-" * w for w in widths]),
    ] + [line(r) for r in rows]
    if not rows:
        out.append("(no samples)")
    for e in result.errors:
        out.append(f"failed: {e.weights} {e.mode} {e.method} K={e.assistant_tokens} ({e.stage}): "
                   + "; ".join(f"{side}: {msg}" for side, msg in e.errors.items()))
    if result.interrupted:
        out.append(f"interrupted: {len(result.samples)} sample(s) measured before the stop")
    return "\n".join(out)


def write_json(result: BenchResult, path: Path) -> None:
    """The result's JSON form (BenchResult.to_dict: the keys it was built with, "class" by name)."""
    write_atomic(path, json.dumps(result.to_dict(), indent=1) + "\n")

