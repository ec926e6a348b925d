"""What a calibration result says, for people: the terminal summary, a check against a
measured sweep, and the verify-cost plot."""

from __future__ import annotations

from pathlib import Path
from statistics import median

from ..core.errors import DemoError
from ..models.calibration_result import Calibration, backend_words, plain_words
from .calibration import BUSY_SHARE
from .cost_model import tokens_per_step


def summary_lines(result: Calibration) -> list[str]:
    """The whole report: what was measured, then what was chosen (python -m demo.calibrate)."""
    return _header(result) + _measured(result) + _verdict(result)


def launch_lines(result: Calibration, full_report: str) -> list[str]:
    """What a launch prints: the choices and the baseline they beat; `full_report` is the
    command that prints the rest (the launch log stays short, issue 32's < 100 lines)."""
    return _header(result) + _verdict(result) + [f"  the whole report: {full_report}"]


def _header(result: Calibration) -> list[str]:
    lines = [f"calibration of {result.preset} ({result.duration_s} s, {result.cores} cores, "
             f"ISA {' '.join(result.fingerprint.isa_flags)})"]
    if result.origin is not None:
        lines.append(f"  these choices: {result.origin.words()}; the rates below were measured on that class's "
                     f"machine by {result.origin.source}")
    busy = max((b for b in result.others_busy or [] if b is not None), default=0.0)
    if busy > BUSY_SHARE:
        lines.append(f"  warning: other processes used {busy:.0%} of the CPU around the measurement; "
                     "times may be high: run again with --force on a quiet machine")
    return lines


def _measured(result: Calibration) -> list[str]:
    lines = []
    for fmt, m in result.main.items():
        if "fair" not in m.verify_s:  # measured alone only (Plan.alone_only): its rate is with the baselines'
            lines.append(f"  main {fmt:9s} its quality read and timed alone only: a baseline, not a pair's main")
            continue
        fair = m.verify_s["fair"]
        one = fair[0]
        if m.dominated:
            ends = m.fair_measured_at
            curve = (f"M={ends[-1]} ÷ 1: {fair[ends[-1] - 1] / one:.2f}" if ends
                     else f"M=1..{len(fair)} ÷ 1: " + " ".join(f"{v / one:.2f}" for v in fair))
            lines.append(f"  main {fmt:9s} 1 token {one * 1000:6.1f} ms; {curve}; cannot beat the others here: "
                         "not measured further")
            continue
        curve = " ".join(f"{v / one:.2f}" for v in fair)
        decode = f" (real decoding step {m.decode_step_s * 1000:.1f} ms)" if m.decode_step_s else ""
        lines.append(f"  main {fmt:9s} 1 token {one * 1000:6.1f} ms{decode}; M=1..{len(fair)} tokens ÷ 1 token: "
                     f"{curve}; {m.memory_bytes / (1 << 30):.1f} GB")
    for fmt, d in result.draft.items():
        lines.append(f"  draft {fmt:8s} 1 token {d.step_s['fair'] * 1000:6.1f} ms")
    for pair, runs in result.agreement_runs.items():
        tokens = sum(len(r) for r in runs)
        right = sum(1 for r in runs for a in r if a > 0)
        lines.append(f"  {pair:14s} draft guesses {right / max(1, tokens) * 100:.0f}% of {tokens} answer tokens right; "
                     f"tokens per step K=1..{result.k_max}: "
                     + " ".join(f"{tokens_per_step(runs, k):.2f}" for k in range(1, result.k_max + 1)))
    # Every pair timed in a real pipeline (before version 5: the one pair per mode).
    timed = [(mode, o) for mode, pairs in result.pipeline_overheads.items() for o in pairs.values()]
    for mode, o in timed or list(result.pipeline_overhead.items()):
        steps = ", ".join(f"K={k} {o.measured_step_s[k] * 1000:.1f} ms (model {o.predicted_step_s[k] * 1000:.1f})"
                          for k in o.measured_step_s)
        lines.append(f"  {mode:4s} pipeline, main {o.main_format}, draft {o.draft_format}: a real step {steps}; "
                     f"the other K add {o.per_step_s * 1000:.1f} ms + {o.per_guess_s * 1000:.1f} ms × K; "
                     f"main {'without a draft beside it' if o.baseline_rates else 'alone'} "
                     f"{o.baseline_step_s * 1000:.1f} ms a token, {o.baseline_overhead_s * 1000:+.1f} "
                     "ms on the model's")
    for mode, o in result.pipeline_overhead.items():
        if o.speculative_tok_s and o.baseline_rates:  # race mode, both timed in the same seconds
            base = median(o.baseline_rates)
            lines.append(f"  {mode:4s} measured side by side: speculative " + ", ".join(
                f"K={k} {v:.1f} tok/s ({v / base:.2f}×)" for k, v in o.speculative_tok_s.items())
                + f" against the baseline's {base:.1f} tok/s beside it (decode rates after the first token)")
        elif o.speculative_tok_s and result.baseline.get(mode):  # fair mode: each pipeline alone, one stage apart
            base = result.baseline[mode].baseline_tok_s
            lines.append(f"  {mode:4s} measured in its real pipeline: speculative " + ", ".join(
                f"K={k} {v:.1f} tok/s ({v / base:.2f}×)" for k, v in o.speculative_tok_s.items())
                + f" against the baseline's {base:.1f} tok/s timed alone in the stage before (not paired: "
                "scripts/headline.py pairs them)")
    for fmt, share in result.quality.items():
        if fmt != "gguf":
            lines.append(f"  main {fmt:9s} agrees with the original GGUF's greedy choice on {share:.1%} of answer tokens"
                         + (" (below the bound: not a candidate)" if share < (result.min_agreement or 0) else ""))
    for mode, p in result.plain.items():
        rates = {f: median(r) for f, r in p.rates.items() if r}
        how = (f"beside the {p.beside} speculative pipeline, as it races" if p.beside else
               f"real pipelines {'interleaved' if p.interleaved else 'one after another'}")
        lines.append(f"  {mode:4s} main {'without a draft' if p.beside else 'alone'}, {how}"
                     f" ({sum(len(r) for r in p.rates.values())} runs): "
                     + ", ".join(f"{plain_words(f)} {v:.1f}" for f, v in sorted(rates.items(), key=lambda x: -x[1]))
                     + " tok/s after the first token (median)")
    return lines


def _verdict(result: Calibration) -> list[str]:
    lines = []
    for mode, c in result.choice.items():
        base = result.baseline.get(mode)
        if base is None:  # before version 6: the model's prediction for its own main
            lines.append(f"  {mode:4s}: main {c.main_format}, draft {c.draft_format}, K={c.k}: predicted "
                         f"{c.speculative_tok_s:.1f} tok/s vs {c.baseline_tok_s:.1f} alone ({c.speedup:.2f}×)")
            continue
        beside = result.plain.get(mode) is not None and result.plain[mode].beside
        lines.append(f"  {mode:4s}: main {c.main_format}, draft {c.draft_format}, K={c.k}: predicted "
                     f"{c.speculative_tok_s:.1f} tok/s vs {base.baseline_tok_s:.1f} measured for the baseline, "
                     f"{base.main_format} {'without a draft, racing beside it' if beside else 'alone'}"
                     f"{backend_words(base.attention)} "
                     f"({c.speculative_tok_s / base.baseline_tok_s:.2f}×: what speculation buys)")
    fair = result.plain.get("fair")
    base = result.baseline.get("fair")
    if fair is not None and fair.rates.get("gguf") and base:
        lines.append(f"  what the format buys: {base.main_format} alone runs "
                     f"{base.baseline_tok_s / median(fair.rates['gguf']):.2f}× the original GGUF's weights alone (fair threads)")
    elif fair is not None and base:  # the GGUF was not timed alone (cost_model.plain_contenders): bare models
        curves = {f: result.main[f].verify_s.get("fair") for f in (base.main_format, "gguf") if f in result.main}
        if len(curves) == 2 and all(curves.values()):
            ours, gguf = curves[base.main_format][0], curves["gguf"][0]
            lines.append(f"  what the format buys: {base.main_format}'s model takes {ours * 1000:.1f} ms a token, the "
                         f"original GGUF's {gguf * 1000:.1f} ms ({gguf / ours:.2f}×; bare models: the GGUF was too slow "
                         "to time alone)")
    llama = fair.reference.get("llama.cpp") if fair is not None else None
    if llama and result.baseline.get("fair"):
        lines.append(f"  reference: llama.cpp's plain decoding of the same GGUF, {median(llama):.1f} tok/s (fair threads, "
                     f"timed in the same rotation); the baseline runs {result.baseline['fair'].baseline_tok_s / median(llama):.2f}× it")
    if result.precision is not None:
        lines.append(f"  activations: {result.precision.choice} ({result.precision.reason})")
    fa = result.fastest_alone
    lines.append(f"  fastest main alone: {fa.main_format}{backend_words(fa.attention)} "
                 f"at {fa.baseline_tok_s:.1f} tok/s "
                 f"({'measured' if result.plain else 'predicted'}, fair threads)")
    return lines


def against_sweep(result: Calibration, sweep: dict, mode: str = "fair") -> list[str]:
    """Calibration's choice checked against a measured sweep (`python -m demo.bench --json`
    over formats and K, same mode, as read from its file): predicted vs measured for every
    configuration, and the measured tok/s of the calibrated choice against the sweep's best."""
    predicted = {(c.main_format, c.draft_format, c.k): c.speculative_tok_s
                 for c in result.candidates if c.mode == mode}
    measured = {}
    for agg in sweep["aggregates"]:
        if agg["method"] != "draft" or agg["mode"] not in (("sequential", "fair") if mode == "fair" else ("race",)):
            continue
        main, draft = agg["weights"].split("/")
        measured[(main, draft, agg["assistant_tokens"])] = agg["overall"]["speculative_tokens_per_s"]["mean"]
    if not measured:
        raise DemoError(f"The sweep has no {mode}-mode draft configurations to compare with.")
    lines = [f"{mode} mode: predicted vs measured speculative tok/s"]
    for key in sorted(measured, key=measured.get, reverse=True):
        guess = predicted.get(key)
        lines.append(f"  {key[0]}/{key[1]} K={key[2]}: measured {measured[key]:5.1f}" +
                     (f", predicted {guess:5.1f} ({guess / measured[key]:.2f}×)" if guess else ", not calibrated"))
    best = max(measured, key=measured.get)
    c = result.choice[mode]
    chosen = (c.main_format, c.draft_format, c.k)
    if chosen in measured:
        lines.append(f"  calibrated choice {chosen[0]}/{chosen[1]} K={chosen[2]}: {measured[chosen]:.1f} tok/s = "
                     f"{measured[chosen] / measured[best]:.2f}× the sweep's best ({best[0]}/{best[1]} K={best[2]}, "
                     f"{measured[best]:.1f})")
    else:
        lines.append(f"  calibrated choice {chosen[0]}/{chosen[1]} K={chosen[2]} is not in the sweep")
    return lines


def write_plot(result: Calibration, path: Path) -> None:
    """This machine's verify-cost curves: cost of one main-model step of M tokens ÷ one token."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, mode in zip(axes, ("fair", "race")):
        for i, (fmt, m) in enumerate(result.main.items()):
            curve = m.verify_s.get(mode)  # a format that could not win has no race curve
            if curve:
                ax.plot(range(1, len(curve) + 1), [v / curve[0] for v in curve], marker="o", color=f"C{i}",
                        label=f"{fmt} ({curve[0] * 1000:.0f} ms for 1 token)")
        top = result.k_max + 1
        ax.plot([1, top], [1, top], ":", color="grey", label="each token costs a full step")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        threads = result.threads[mode]
        ax.set_title(f"{mode}: {threads or 'all'} thread(s) per pipeline")
        ax.set_xlabel("tokens checked in one main-model step (K + 1)")
        ax.legend(fontsize="small")
    axes[0].set_ylabel("step cost ÷ cost of 1 token")
    flags = " ".join(result.fingerprint.isa_flags)
    fig.suptitle(f"Verify-cost curves, {result.preset} main model ({flags})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
