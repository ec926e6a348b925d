"""The load benchmark's table and plot (demo.bench.load's JSON form in, text or PNG out)."""

from __future__ import annotations

import json
from pathlib import Path

from ..core.streaming import BASELINE, SPECULATIVE


def _f(value, fmt: str = ".1f", none: str = "–") -> str:
    return none if value is None else format(value, fmt)


def crossover_sentence(result: dict) -> str:
    ns = result["settings"]["concurrency"]
    n = result.get("crossover")
    if result.get("interrupted"):
        return "Stopped before every request count was measured: no crossover."
    if n is None:
        return f"Speculation paid at every request count measured (up to {max(ns)} at once)."
    if n == min(ns):
        return f"Speculation did not pay even at {n} request{'s' if n != 1 else ''} at once."
    return f"Speculation stops paying from {n} simultaneous requests (aggregate tok/s, speculative ÷ baseline <= 1)."


def format_load_table(result: dict) -> str:
    """One row per N: aggregate tok/s of both sides and their paired ratio, per-request rates,
    TTFT and completion latency p50/p95, tokens per step; then the crossover."""
    s = result["settings"]
    head = (f"Throughput under load: {result['preset']['name']} (main {result['preset']['main_format']}, draft "
            f"{result['preset']['draft_format']}), K={s['assistant_tokens']}, {s['max_new_tokens']} new tokens, "
            f"{len(s['prompts'])} prompts in turn, {s['rounds']} round{'s' if s['rounds'] != 1 else ''} "
            "(baseline, speculative, …), greedy")
    cols = ("N", "side", "agg tok/s", "ratio", "req tok/s p50", "TTFT p50/p95 s", "latency p50/p95 s",
            "tok/step (req)", "tok/step (batch)")
    rows = [cols]
    for row in result["summary"]:
        for side in (BASELINE, SPECULATIVE):
            x = row[side]
            ratio = ""
            if side == SPECULATIVE and row["ratio_median"] is not None:
                ratio = f"{row['ratio_median']:.2f}× ({', '.join(f'{r:.2f}' for r in row['ratios'])})"
            rows.append((str(row["n"]) if side == BASELINE else "", side, _f(x["aggregate_tok_s"]), ratio,
                         _f(x["decode_tok_s_p50"]),
                         f"{_f(x['ttft_s_p50'], '.2f')}/{_f(x['ttft_s_p95'], '.2f')}",
                         f"{_f(x['latency_s_p50'], '.1f')}/{_f(x['latency_s_p95'], '.1f')}",
                         _f(x["tokens_per_step"], ".2f"), _f(x["batch_tokens_per_step"], ".2f")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(cols))]
    lines = [head, ""] + ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines += ["", crossover_sentence(result)]
    if result.get("cut_at_round"):
        lines.append(f"The time limit stopped it after {result['cut_at_round']} of {s['rounds']} rounds.")
    if result.get("record"):
        lines.append(f"Saved for this machine: {result['record']['file']}.")
    return "\n".join(lines)


def write_load_json(result: dict, path: Path) -> None:
    Path(path).write_text(json.dumps(result, indent=2))


def write_load_plot(result: dict, path: Path) -> None:
    """Aggregate tok/s vs N for both sides (every round a dot, the median a line); the paired
    ratio vs N with 1.0 and the crossover marked; completion latency p50/p95 vs N."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = result["summary"]
    ns = [row["n"] for row in summary]
    fig, (agg, ratio, lat) = plt.subplots(1, 3, figsize=(16, 4.6))
    fig.suptitle(f"Throughput under load: {result['preset']['name']}, K={result['settings']['assistant_tokens']}, "
                 f"{result['settings']['max_new_tokens']} new tokens"
                 f"{', interrupted' if result.get('interrupted') else ''}")
    colours = {BASELINE: "C0", SPECULATIVE: "C1"}
    for side in (BASELINE, SPECULATIVE):
        dots = [(s["n"], s[side]["aggregate_tok_s"]) for s in result["samples"]
                if s.get(side) and s[side]["aggregate_tok_s"] is not None]
        if dots:
            agg.scatter(*zip(*dots), color=colours[side], alpha=0.4, s=14)
        agg.plot(ns, [row[side]["aggregate_tok_s"] for row in summary], "-o", color=colours[side], label=side)
        lat.plot(ns, [row[side]["latency_s_p50"] for row in summary], "-o", color=colours[side], label=f"{side} p50")
        lat.plot(ns, [row[side]["latency_s_p95"] for row in summary], "--", color=colours[side], label=f"{side} p95")
    agg.set_ylabel("aggregate tokens/s (all requests)")
    agg.set_title("aggregate throughput")
    ratio.plot(ns, [row["ratio_median"] for row in summary], "-o", color="C2")
    for s in result["samples"]:
        if s.get("ratio") is not None:
            ratio.scatter([s["n"]], [s["ratio"]], color="C2", alpha=0.4, s=14)
    ratio.axhline(1.0, color="grey", linestyle=":")
    if result.get("crossover") is not None:
        ratio.axvline(result["crossover"], color="C3", linestyle="--", label=f"crossover N={result['crossover']}")
        ratio.legend(fontsize="small")
    ratio.set_ylabel("speculative ÷ baseline aggregate tok/s (paired)")
    ratio.set_title("where speculation stops paying")
    lat.set_ylabel("completion latency, s (from submission)")
    lat.set_title("latency per request")
    for ax in (agg, ratio, lat):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.set_xlabel("simultaneous requests (N)")
    agg.legend(fontsize="small")
    lat.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
