"""Calibrate a preset on this machine: which weight formats and how many assistant tokens.

    python -m demo.calibrate --preset NAME [--json PATH] [--main-formats gguf,int8,f16]
                             [--draft-formats gguf,int8] [--k-max 8] [--force]

What is fastest depends on the CPU and on memory (../shared/design/models.md, "Machines
differ"): where a compressed MatMul costs almost K+1 times as much to verify K+1 tokens,
speculation barely pays; where the verify step is bound by memory, it pays a lot. So we
measure, for each candidate format:
  * the main model's cost for one forward step of M = 1..K_max+1 new tokens after a
    100-token prefix (the verify-cost curve), with the threads each mode gives a pipeline;
  * the draft's cost for one token;
  * resident memory of the compiled model;
  * acceptance, per format pair: the main model's greedy answers to a few built-in prompts,
    and what the draft guesses at every position of them (one teacher-forced pass). With
    greedy decoding that fixes, for every K, which guesses each step keeps, so the tokens
    per step τ(K) are counted, not sampled from a few steps of one K.
The standard model (Leviathan et al.) then predicts, per format pair, mode and K:
    speculative tok/s = τ(K) / (K·draft + verify(K+1))
and we pick the fastest configuration that fits the memory budget (a race holds two
pipelines, each compiling the main model; fair mode can load them one at a time).
The raw model misses what a real pipeline adds to each step (scheduling, sampling, two
KV caches), which favours small K and fast-stepping formats: so, per mode, the best
format pair runs in the arena's own speculative pipeline at K=1 and two larger K, the
difference between its real and predicted steps gives an overhead of a + b·K per step
(through the two larger K; K=1 keeps its own, as its real step sits 20 % below that line),
and every configuration is predicted again with it before choosing (among those within 3 % of the
fastest, the one with the largest speedup over its own main model). Results are cached
per machine fingerprint (CPU, ISA flags, cores, RAM, OpenVINO version, model checksums)
and reused (demo.models.calibration_store reads them back).

Every measurement runs in a child process, one saved stage at a time
(demo.calibrate.stages): a native crash skips its configuration, a restart resumes.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

from ..core.errors import DemoError, run_command
from ..models.calibration_store import CALIBRATION_VERSION, cache_path, fingerprint, load_cached, stages_path
from .cost_model import overhead_ks, pick_among_fastest, predict, tokens_per_step
from .measure import DRAFT_REPEATS, PREFIX_TOKENS, REPEATS, others_busy, sparse_points

DEFAULT_K_MAX = 8
DEFAULT_MAIN_FORMATS = ("gguf", "int8", "int4_sym", "f16")
DEFAULT_DRAFT_FORMATS = ("gguf", "int8")
# Acceptance is measured on the benchmark's first code prompts, answered as far as the
# benchmark answers them (python -m demo.bench --prompts code --limit-prompts 2
# --max-new-tokens 128), so a sweep can check the choice on the very same prompts. The
# embedded pair is a coder; free-form chat accepts fewer guesses and favours a smaller K.
DEFAULT_PROMPT_CLASSES = ("code",)
DEFAULT_PROMPTS_PER_CLASS = 2
DEFAULT_NEW_TOKENS = 128
BUSY_SHARE = 0.2  # other processes' share of the cores above which a calibration warns

Report = Callable[[str], None]


@dataclass(frozen=True)
class Plan:
    """How much a calibration measures. The launch plan is what `python app.py` runs on a
    fresh machine before it says Ready: acceptance from the first main format's answers
    only (the others' agree within a few %: 95 % against 93 % on the embedded pair),
    sparse curves everywhere, fewer rounds, and a real pipeline timed on one prompt, over
    its first `overhead_new_tokens` tokens (enough steps at every K; half the time of 128)
    and only at the two K its overhead line goes through (K=1 then follows the line)."""

    name: str
    sparse_fair: bool = False
    repeats: int = REPEATS
    acceptance_per_main: bool = True
    draft_repeats: int = DRAFT_REPEATS
    overhead_prompts: Optional[int] = None   # None: all the calibration prompts
    overhead_new_tokens: Optional[int] = None  # None: as many as the acceptance answers
    overhead_at_k1: bool = True  # also time K=1 itself, which can sit off the line


FULL = Plan("full")
LAUNCH = Plan("launch", sparse_fair=True, repeats=3, acceptance_per_main=False, draft_repeats=8, overhead_prompts=1,
              overhead_new_tokens=48, overhead_at_k1=False)


def launch_formats(isa_flags: Sequence[str]) -> tuple[list[str], list[str]]:
    """(main, draft) formats a first launch calibrates: the GGUF-derived IR it already has and
    the compressed format that won on this CPU class (BENCHMARKS.md): int4_sym where integer
    dot products are fast (VNNI or AMX: fastest main alone on Zen 4 and the AMX Xeon), f16
    where only AVX2 (compressed verify steps cost nearly K+1 tokens there, f16 barely more
    than one). The first main format answers the acceptance prompts, so the faster one goes
    first (int4_sym: 88 against 198 ms a token on the AMX Xeon), and a slower format that
    cannot beat it is not measured further. `python -m demo.calibrate` measures every format."""
    fast_int = any(f in isa_flags for f in ("avx512_vnni", "avx_vnni", "amx_int8"))
    return (["int4_sym", "gguf"] if fast_int else ["gguf", "f16"]), ["gguf"]


# -- the whole calibration ----------------------------------------------------------------

def prepare_candidates(preset, store, main_formats: Sequence[str] = DEFAULT_MAIN_FORMATS,
                       draft_formats: Sequence[str] = DEFAULT_DRAFT_FORMATS, report: Report = lambda m: None,
                       stop: Optional[threading.Event] = None) -> dict:
    """Prepare every candidate format (the long part of a first calibration: converting
    weights, each conversion in a child process); {("main"|"draft", format): folder}. Needs
    no quiet machine, so the app runs it while visitors race."""
    folders = {}
    for role, spec, fmts in (("draft", preset.draft, draft_formats), ("main", preset.main, main_formats)):
        for fmt in fmts:
            if stop is not None and stop.is_set():
                raise DemoError("Calibration was stopped; what was measured so far is kept.")
            report(f"preparing the {role} model as {fmt}")
            folders[(role, fmt)] = store.prepare(spec, f"{role} model", lambda stage, d, t: report(stage),
                                                 weight_format=fmt, cancel=stop).path
    return folders


def calibrate(preset, store, *, main_formats: Sequence[str] = DEFAULT_MAIN_FORMATS,
              draft_formats: Sequence[str] = DEFAULT_DRAFT_FORMATS, k_max: int = DEFAULT_K_MAX,
              prompts: Optional[Sequence[str]] = None, max_new_tokens: int = DEFAULT_NEW_TOKENS,
              budget: Optional[int] = None, report: Report = lambda m: None,
              stop: Optional[threading.Event] = None, slot=None,
              stages_module: str = "demo.calibrate.stages", plan: Plan = FULL) -> dict:
    """Measure `preset` on this machine and save the choice (see the module docstring).

    Every measurement runs in a child process, one stage at a time (demo.calibrate.stages):
    `slot(what)` is entered around each stage (the app's admission point, so visitors wait
    one stage at most), a native crash skips its configuration, and a restart resumes from
    the stages saved."""
    from ..core.bench_prompts import select
    from ..core.memory import budget_bytes, gb
    from ..core.settings import cpu_cores, race_threads
    from ..engine.safety import SafetyRecord
    from .stages import StageRunner

    if preset.draft is None:
        raise DemoError(f"Preset {preset.name!r} has no draft model; there is nothing to calibrate.")
    started = time.time()
    budget = budget_bytes() if budget is None else budget
    threads = {"fair": None, "race": race_threads()}
    texts = list(prompts) if prompts else [p.text for p in select(DEFAULT_PROMPT_CLASSES, DEFAULT_PROMPTS_PER_CLASS)]

    def check_stop():
        if stop is not None and stop.is_set():
            raise DemoError("Calibration was stopped; what was measured so far is kept.")

    folders = prepare_candidates(preset, store, main_formats, draft_formats, report, stop)
    check_stop()
    busy_before = others_busy()
    fp = fingerprint(preset, store)
    identity = {"version": CALIBRATION_VERSION, "fingerprint": fp, "main": list(main_formats),
                "draft": list(draft_formats), "k_max": k_max, "texts": texts, "new": max_new_tokens,
                "module": stages_module, "plan": asdict(plan)}
    stages = StageRunner(stages_path(store, preset.name, fp), identity, SafetyRecord(store.cache_dir), report, stop,
                         **({"slot": slot} if slot is not None else {}), module=stages_module)
    if stages.resumed:
        report(f"resuming calibration: {stages.resumed} stages were measured before a restart")

    drafts = {}
    for fmt in draft_formats:
        measured = stages.run(f"draft:{fmt}", "measure_draft",
                              {"folder": str(folders[("draft", fmt)]), "format": fmt, "threads": threads,
                               "repeats": plan.draft_repeats},
                              what=f"measuring the draft model ({fmt})")
        if "fair" in measured["step_s"]:  # the draft's fair model also guesses along the answers
            drafts[fmt] = measured
        else:
            report(f"draft model {fmt} cannot run here with OpenVINO's default threads: not a candidate")
    if not drafts:
        raise DemoError(f"No draft format of {preset.name!r} runs on this CPU; run python -m demo.doctor to see why.")
    mains, runs, answered_by = {}, {}, None
    for fmt in main_formats:
        check_stop()
        answer = plan.acceptance_per_main or answered_by is None
        measured = stages.run(f"main:{fmt}", "measure_main", {
            "folder": str(folders[("main", fmt)]), "format": fmt, "threads": threads, "k_max": k_max,
            "texts": texts, "max_new_tokens": max_new_tokens, "sparse_fair": plan.sparse_fair,
            "repeats": plan.repeats, "answer": answer,
            "drafts": {df: str(folders[("draft", df)]) for df in drafts},
            "prior": {"mains": mains, "drafts": drafts, "runs": {f"{mf}/{df}": r for (mf, df), r in runs.items()}},
        }, what=f"measuring the main model ({fmt})")
        borrowed = {df: runs[(answered_by, df)] for df in drafts if (answered_by, df) in runs} if not answer else {}
        for df, r in {**measured["runs"], **borrowed}.items():
            if df in drafts:
                runs[(fmt, df)] = r
        if answer and measured["runs"]:
            answered_by = answered_by or fmt
        mains[fmt] = {k: v for k, v in measured.items() if k != "runs"}
    check_stop()

    def candidates_for(mode: str, overhead: tuple, baseline_overhead: float = 0.0,
                       timed_extra: Optional[dict] = None) -> list[dict]:
        out = []
        for mf, m in mains.items():
            if m["dominated"] or mode not in m["verify_s"]:
                continue
            for df, d in drafts.items():
                if mode not in d["step_s"] or (mf, df) not in runs:
                    continue
                # A race holds both pipelines, each compiling the main model; fair mode needs
                # one at a time when both do not fit (PipelineCache.in_turn): main + draft.
                need = (2 if mode == "race" else 1) * m["memory_bytes"] + d["memory_bytes"]
                for k in range(1, k_max + 1):
                    p = predict(m["verify_s"][mode], d["step_s"][mode], runs[(mf, df)], k, overhead, baseline_overhead,
                                timed_extra)
                    out.append({"main_format": mf, "draft_format": df, "mode": mode, **p,
                                "memory_bytes": need, "fits": need <= budget})
        return out

    def fitting(pool: list[dict]) -> list[dict]:
        out = [c for c in pool if c["fits"]]
        if not pool:
            raise DemoError(f"No format pair of {preset.name!r} runs on this CPU in both modes; "
                            "run python -m demo.doctor to see which configurations crash.")
        if not out:
            raise DemoError(f"No format pair of {preset.name!r} fits in {gb(budget)} of memory; "
                            "free memory or choose a smaller preset.")
        return out

    # Per mode: the model's best configuration runs in a real pipeline, which gives the
    # overhead per step the model lacks; every configuration is then predicted with it.
    candidates, choice, overheads = [], {}, {}
    ks = overhead_ks(k_max, plan.overhead_at_k1)
    for mode, n in threads.items():
        first = max(fitting(candidates_for(mode, (0.0, 0.0))), key=lambda c: c["speculative_tok_s"])
        pair = (first["main_format"], first["draft_format"])
        check_stop()
        report(f"timing a real speculative pipeline ({mode} threads): main {pair[0]}, draft {pair[1]}, "
               f"K={', '.join(map(str, ks))}")
        m, d = mains[pair[0]], drafts[pair[1]]
        overheads[mode] = stages.run(f"overhead:{mode}", "measure_overhead", {
            "pair": list(pair), "main_folder": str(folders[("main", pair[0])]),
            "draft_folder": str(folders[("draft", pair[1])]),
            "texts": (texts if mode == "fair" else texts[:1])[:plan.overhead_prompts],
            "max_new_tokens": plan.overhead_new_tokens or max_new_tokens, "threads": n, "ks": list(ks),
            "predicted_step_s": {str(k): predict(m["verify_s"][mode], d["step_s"][mode], runs[pair], k)["step_s"]
                                 for k in ks},
            "one_token_s": m["verify_s"][mode][0]}, what=f"timing a real speculative pipeline ({mode} threads)")
        o = overheads[mode]
        pool = candidates_for(mode, (o["per_step_s"], o["per_guess_s"]), o["baseline_overhead_s"],
                              {int(k): v for k, v in o["extra_s"].items()})
        candidates += pool
        choice[mode] = pick_among_fastest(fitting(pool))
    alone = max((c for c in candidates if c["mode"] == "fair" and c["fits"]), key=lambda c: c["baseline_tok_s"])
    result = {
        "calibration_version": CALIBRATION_VERSION,
        "preset": preset.name,
        "fingerprint": fp,
        "started_at": started,
        "duration_s": round(time.time() - started, 1),
        # Share of the cores other processes used just before and after measuring.
        "others_busy": [None if b is None else round(b, 2) for b in (busy_before, others_busy())],
        "k_max": k_max,
        "plan": plan.name,
        # Whose greedy answers acceptance was counted on, when not every main format's.
        "acceptance_from": None if plan.acceptance_per_main else answered_by,
        "prompts": len(texts),
        "max_new_tokens": max_new_tokens,
        "prefix_tokens": PREFIX_TOKENS,
        "threads": {mode: n for mode, n in threads.items()},
        "race_curve_measured_at": sparse_points(range(1, k_max + 2)),  # the other M of race curves are interpolated
        "cores": cpu_cores(),
        "budget_bytes": budget,
        "main": mains,
        "draft": drafts,
        # Per pair "main/draft": how far the draft guesses right in a row from each answer token.
        "agreement_runs": {f"{mf}/{df}": r for (mf, df), r in runs.items()},
        # Per mode: the real pipeline's step against the model's, and the overhead per step
        # every candidate's prediction includes.
        "pipeline_overhead": overheads,
        "candidates": candidates,
        "choice": choice,
        "fastest_alone": {"main_format": alone["main_format"], "baseline_tok_s": alone["baseline_tok_s"]},
        # Configurations that crashed OpenVINO on this machine, skipped (demo.engine.safety).
        "skipped": stages.skipped(list(folders.values())),
    }
    path = cache_path(store, preset.name, fp)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1))
    tmp.replace(path)
    stages.finish()
    result["path"] = str(path)
    return result


def summary_lines(result: dict) -> list[str]:
    lines = [f"calibration of {result['preset']} ({result['duration_s']} s, {result['cores']} cores, "
             f"ISA {' '.join(result['fingerprint']['isa_flags'] or [])})"]
    busy = max((b for b in result.get("others_busy") or [] if b is not None), default=0.0)
    if busy > BUSY_SHARE:
        lines.append(f"  warning: other processes used {busy:.0%} of the CPU around the measurement; "
                     "times may be high: run again with --force on a quiet machine")
    for fmt, m in result["main"].items():
        fair = m["verify_s"]["fair"]
        one = fair[0]
        if m.get("dominated"):
            lines.append(f"  main {fmt:9s} 1 token {one * 1000:6.1f} ms; M=1..{len(fair)} ÷ 1: "
                         + " ".join(f"{v / one:.2f}" for v in fair) + "; cannot beat the others here: not measured further")
            continue
        curve = " ".join(f"{v / one:.2f}" for v in fair)
        decode = f" (real decoding step {m['decode_step_s'] * 1000:.1f} ms)" if m.get("decode_step_s") else ""
        lines.append(f"  main {fmt:9s} 1 token {one * 1000:6.1f} ms{decode}; M=1..{len(fair)} tokens ÷ 1 token: "
                     f"{curve}; {m['memory_bytes'] / (1 << 30):.1f} GB")
    for fmt, d in result["draft"].items():
        lines.append(f"  draft {fmt:8s} 1 token {d['step_s']['fair'] * 1000:6.1f} ms")
    for pair, runs in result["agreement_runs"].items():
        tokens = sum(len(r) for r in runs)
        right = sum(1 for r in runs for a in r if a > 0)
        lines.append(f"  {pair:14s} draft guesses {right / max(1, tokens) * 100:.0f}% of {tokens} answer tokens right; "
                     f"tokens per step K=1..{result['k_max']}: "
                     + " ".join(f"{tokens_per_step(runs, k):.2f}" for k in range(1, result["k_max"] + 1)))
    for mode, o in (result.get("pipeline_overhead") or {}).items():
        steps = ", ".join(f"K={k} {o['measured_step_s'][k] * 1000:.1f} ms (model {o['predicted_step_s'][k] * 1000:.1f})"
                          for k in o["measured_step_s"])
        lines.append(f"  {mode:4s} pipeline, main {o['main_format']}, draft {o['draft_format']}: a real step {steps}; "
                     f"the other K add {o['per_step_s'] * 1000:.1f} ms + {o['per_guess_s'] * 1000:.1f} ms × K; "
                     f"main alone {o['baseline_step_s'] * 1000:.1f} ms a token, {o['baseline_overhead_s'] * 1000:+.1f} "
                     "ms on the model's")
    for mode, c in result["choice"].items():
        lines.append(f"  {mode:4s}: main {c['main_format']}, draft {c['draft_format']}, K={c['k']}: predicted "
                     f"{c['speculative_tok_s']:.1f} tok/s vs {c['baseline_tok_s']:.1f} alone "
                     f"({c['speculative_tok_s'] / c['baseline_tok_s']:.2f}×)")
    fa = result["fastest_alone"]
    lines.append(f"  fastest main alone: {fa['main_format']} at {fa['baseline_tok_s']:.1f} tok/s (predicted)")
    return lines


def against_sweep(result: dict, sweep: dict, mode: str = "fair") -> list[str]:
    """Calibration's choice checked against a measured sweep (`python -m demo.bench --json`
    over formats and K, same mode): predicted vs measured for every configuration, and the
    measured tok/s of the calibrated choice against the sweep's best."""
    predicted = {(c["main_format"], c["draft_format"], c["k"]): c["speculative_tok_s"]
                 for c in result["candidates"] if c["mode"] == mode}
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
    c = result["choice"][mode]
    chosen = (c["main_format"], c["draft_format"], c["k"])
    if chosen in measured:
        lines.append(f"  calibrated choice {chosen[0]}/{chosen[1]} K={chosen[2]}: {measured[chosen]:.1f} tok/s = "
                     f"{measured[chosen] / measured[best]:.2f}× the sweep's best ({best[0]}/{best[1]} K={best[2]}, "
                     f"{measured[best]:.1f})")
    else:
        lines.append(f"  calibrated choice {chosen[0]}/{chosen[1]} K={chosen[2]} is not in the sweep")
    return lines


def write_plot(result: dict, path: Path) -> None:
    """This machine's verify-cost curves: cost of one main-model step of M tokens ÷ one token."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, mode in zip(axes, ("fair", "race")):
        for i, (fmt, m) in enumerate(result["main"].items()):
            curve = m["verify_s"].get(mode)  # a format that could not win has no race curve
            if curve:
                ax.plot(range(1, len(curve) + 1), [v / curve[0] for v in curve], marker="o", color=f"C{i}",
                        label=f"{fmt} ({curve[0] * 1000:.0f} ms for 1 token)")
        top = result["k_max"] + 1
        ax.plot([1, top], [1, top], ":", color="grey", label="each token costs a full step")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        threads = result["threads"][mode]
        ax.set_title(f"{mode}: {threads or 'all'} thread(s) per pipeline")
        ax.set_xlabel("tokens checked in one main-model step (K + 1)")
        ax.legend(fontsize="small")
    axes[0].set_ylabel("step cost ÷ cost of 1 token")
    flags = " ".join(result["fingerprint"].get("isa_flags") or [])
    fig.suptitle(f"Verify-cost curves, {result['preset']} main model ({flags})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m demo.calibrate", description=__doc__.split("\n")[0])
    ap.add_argument("--preset", help="preset name (default: models.yaml's default)")
    ap.add_argument("--json", type=Path, help="also write the result here")
    ap.add_argument("--plot", type=Path, help="write the verify-cost curves as a PNG here")
    ap.add_argument("--main-formats", default=",".join(DEFAULT_MAIN_FORMATS))
    ap.add_argument("--draft-formats", default=",".join(DEFAULT_DRAFT_FORMATS))
    ap.add_argument("--k-max", type=int, default=DEFAULT_K_MAX)
    ap.add_argument("--prompts", default=",".join(DEFAULT_PROMPT_CLASSES), metavar="CLASS[,CLASS…]",
                    help="benchmark prompt classes to measure acceptance on: code,chat,summarize (default code)")
    ap.add_argument("--limit-prompts", type=int, default=DEFAULT_PROMPTS_PER_CLASS, metavar="N",
                    help=f"the first N prompts of each class (default {DEFAULT_PROMPTS_PER_CLASS})")
    ap.add_argument("--max-new-tokens", type=int, default=DEFAULT_NEW_TOKENS)
    ap.add_argument("--force", action="store_true", help="measure again even if this machine has a result")
    ap.add_argument("--against", type=Path, metavar="BENCH_JSON",
                    help="compare the choice with a measured sweep (python -m demo.bench --json, formats × K)")
    ap.add_argument("--models", type=Path)
    ap.add_argument("--cache-dir", type=Path)
    args = ap.parse_args(argv)

    def body() -> int:
        from ..models.presets import load_presets
        from ..models.sources import ModelStore

        from ..core.bench_prompts import select

        if not 1 <= args.k_max <= 16:
            raise DemoError("--k-max must be from 1 to 16.")
        if not 1 <= args.limit_prompts <= 10 or not 16 <= args.max_new_tokens <= 512:
            raise DemoError("--limit-prompts must be from 1 to 10 and --max-new-tokens from 16 to 512.")
        texts = [p.text for p in select([c.strip() for c in args.prompts.split(",") if c.strip()], args.limit_prompts)]
        store = ModelStore(args.cache_dir)
        preset = load_presets(args.models).get(args.preset)
        result = None if args.force else load_cached(store, preset)
        if result is None:
            result = calibrate(preset, store, main_formats=_formats(args.main_formats),
                               draft_formats=_formats(args.draft_formats), k_max=args.k_max,
                               prompts=texts, max_new_tokens=args.max_new_tokens, report=lambda m: print(f"  … {m}", file=sys.stderr, flush=True))
        else:
            print("(cached for this machine; --force measures again)", file=sys.stderr)
        print("\n".join(summary_lines(result)))
        if args.json:
            args.json.write_text(json.dumps(result, indent=1))
        if args.plot:
            write_plot(result, args.plot)
        if args.against:
            try:
                sweep = json.loads(args.against.read_text())
            except (OSError, ValueError) as e:
                raise DemoError(f"Could not read the sweep {args.against} ({e}); pass a file python -m demo.bench --json wrote.")
            modes = {a["mode"] for a in sweep.get("aggregates", [])}
            for mode in ("fair", "race"):
                if modes & ({"sequential", "fair"} if mode == "fair" else {"race"}):
                    print("\n".join(against_sweep(result, sweep, mode)))
        return 0

    return run_command(body, interrupted="calibration interrupted; nothing was saved")


def _formats(text: str) -> list[str]:
    from ..models.formats import FORMATS

    out = [f.strip() for f in text.split(",") if f.strip()]
    bad = [f for f in out if f not in FORMATS]
    if not out or bad:
        raise DemoError(f"Formats must be a comma-separated list of: {', '.join(FORMATS)}.")
    return out


if __name__ == "__main__":
    sys.exit(main())
