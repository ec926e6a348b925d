"""Calibrate a preset on this machine: which weight formats and how many assistant tokens
(the command line is demo/calibrate/__main__.py, the report demo/calibrate/report.py).

What is fastest depends on the CPU and on memory (BENCHMARKS.md compares machines): where
a compressed MatMul costs almost K+1 times as much to verify K+1 tokens,
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
(through the two larger K; K=1 keeps its own, as its real step sits off that line),
and every configuration is predicted again with it before choosing (among those within 3 % of the
fastest, the one with the largest speedup over its own main model). When another pair then
wins, its own pipeline is timed too and the choice made again (choose_timed), so the chosen
pair's prediction always carries its own real overhead. The activation precision every
pipeline is built with is measured too (demo.calibrate.precision). Results are cached
per machine fingerprint (CPU, ISA flags, cores, RAM, OpenVINO version, model checksums)
and reused (demo.models.calibration_store reads them back).

Every measurement runs in a child process, one saved stage at a time
(demo.calibrate.stages): a native crash skips its configuration, a restart resumes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict
from typing import Callable, Optional, Sequence

from ..core.errors import DemoError
from ..core.placement import BASELINE_ATTENTIONS
from ..models.calibration_result import Calibration, split_plain_key
from ..models.calibration_store import CALIBRATION_VERSION, cache_path, fingerprint, stages_path
from ..models.sources import has_formats
from .cost_model import median as cost_model_median
from .cost_model import (PLAIN_MARGIN, RACE_MARGIN, STATEFUL_MARGIN, choose_timed, overhead_ks, pair_of,
                         paged_unless_clearly_slower, pick_among_fastest, plain_choice, plain_contenders, predict,
                         race_contenders)
from ..core.machine import others_busy
from .measure import MIN_AGREEMENT, PREFIX_TOKENS, quality_gate, sparse_points
from .plan import FULL, LAUNCH, Plan  # noqa: F401 (calibration.LAUNCH is the launch's plan)
from ..core.files import write_atomic
from . import precision

DEFAULT_K_MAX = 8
DEFAULT_MAIN_FORMATS = ("gguf", "int8", "int4_sym", "int4_channel", "f16")
DEFAULT_DRAFT_FORMATS = ("gguf", "int8", "int4_sym")  # int4_sym: as fast as gguf per guess on the AMX Xeon
# Acceptance is measured on the benchmark's first code prompts, answered as far as the
# benchmark answers them (python -m demo.bench --prompts code --limit-prompts 2
# --max-new-tokens 128), so a sweep can check the choice on the very same prompts. The
# embedded pair is a coder; free-form chat accepts fewer guesses and favours a smaller K.
DEFAULT_PROMPT_CLASSES = ("code",)
DEFAULT_PROMPTS_PER_CLASS = 2
DEFAULT_NEW_TOKENS = 128
BUSY_SHARE = 0.2  # other processes' share of the cores above which a calibration warns
STAGES_VERSION = 2  # a restart resumes only stages of this shape (2: drafts in turn, quality in main stages)

Report = Callable[[str], None]


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
            if store.ready_path(spec, fmt) is None:  # a format already on disk needs no line in the log
                report(f"preparing the {role} model as {fmt}")
            folders[(role, fmt)] = store.prepare(spec, f"{role} model", lambda stage, d, t: report(stage),
                                                 weight_format=fmt, cancel=stop).path
    return folders


def calibrate(preset, store, *, main_formats: Sequence[str] = DEFAULT_MAIN_FORMATS,
              draft_formats: Sequence[str] = DEFAULT_DRAFT_FORMATS, k_max: int = DEFAULT_K_MAX,
              prompts: Optional[Sequence[str]] = None, max_new_tokens: int = DEFAULT_NEW_TOKENS,
              budget: Optional[int] = None, report: Report = lambda m: None,
              stop: Optional[threading.Event] = None, slot=None,
              stages_module: str = "demo.calibrate.stages", plan: Plan = FULL,
              race_pair: Optional[Callable[..., dict]] = None) -> Calibration:
    """Measure `preset` on this machine, save the choice and return it, its `path` set
    (see the module docstring; the saved form: demo.models.calibration_result).

    Every measurement runs in a child process, one stage at a time (demo.calibrate.stages):
    `slot(what)` is entered around each stage (the app's admission point, so visitors wait
    one stage at most), a native crash skips its configuration, and a restart resumes from
    the stages saved. `race_pair(main, draft, baseline_main, threads)`, when given (the app at
    launch), loads the app's own race pipelines of those folders: race mode is timed on them,
    so the chosen pair is already warm when the app says Ready."""
    from ..core.bench_prompts import CALIBRATION_SET, named
    from ..core.memory import budget_bytes, gb
    from ..core.settings import cpu_cores, race_threads
    from ..engine import llamacpp
    from ..engine.safety import SafetyRecord
    from .stages import StageRunner, measure_overhead

    if preset.draft is None:
        raise DemoError(f"Preset {preset.name!r} has no draft model; there is nothing to calibrate.")
    if not (has_formats(preset.main) and has_formats(preset.draft)):
        raise DemoError(f"Calibration chooses the weight formats of pypi and gguf pairs, and {preset.name!r} is used "
                        f"as shipped; measure its K with python -m demo.bench --preset {preset.name} "
                        "--assistant-tokens 2,3,4,5.")
    started = time.time()
    budget = budget_bytes() if budget is None else budget
    threads = {"fair": None, "race": race_threads()}
    texts = list(prompts) if prompts else [p.text for p in named(CALIBRATION_SET)]

    def check_stop():
        if stop is not None and stop.is_set():
            raise DemoError("Calibration was stopped; what was measured so far is kept.")

    folders = prepare_candidates(preset, store, main_formats, draft_formats, report, stop)
    check_stop()
    busy_before = others_busy()
    fp = fingerprint(preset, store)
    identity = {"version": CALIBRATION_VERSION, "fingerprint": fp, "main": list(main_formats),
                "draft": list(draft_formats), "k_max": k_max, "texts": texts, "new": max_new_tokens,
                "module": stages_module, "plan": asdict(plan), "stages": STAGES_VERSION}
    stages = StageRunner(stages_path(store, preset.name, fp), identity, SafetyRecord(store.cache_dir), report, stop,
                         **({"slot": slot} if slot is not None else {}), module=stages_module)
    if stages.resumed:
        report(f"resuming calibration: {stages.resumed} stages were measured before a restart")

    drafts, measured_drafts = {}, stages.run("drafts", "measure_drafts", {
        "folders": {fmt: str(folders[("draft", fmt)]) for fmt in draft_formats}, "threads": threads,
        "repeats": plan.draft_repeats}, what="measuring the draft models")
    for fmt, measured in measured_drafts.items():
        if "fair" in measured["step_s"]:  # the draft's fair model also guesses along the answers
            drafts[fmt] = measured
        else:
            report(f"draft model {fmt} cannot run here with OpenVINO's default threads: not a candidate")
    if not drafts:
        raise DemoError(f"No draft format of {preset.name!r} runs on this CPU; run python -m demo.doctor to see why.")
    mains, runs, answered_by, answers, reads, measured_precision = {}, {}, None, {}, {}, None
    for fmt in main_formats:
        check_stop()
        answer = plan.acceptance_per_main or answered_by is None
        measured = stages.run(f"main:{fmt}", "measure_main", {
            "folder": str(folders[("main", fmt)]), "format": fmt, "threads": threads, "k_max": k_max,
            "texts": texts, "max_new_tokens": max_new_tokens, "sparse_fair": plan.sparse_fair,
            "repeats": plan.repeats, "answer": answer, "read_along": answers.get(answered_by),
            "drafts": {df: str(folders[("draft", df)]) for df in drafts},
            "precision": fmt == precision.measured_format(main_formats), "alone_only": fmt in plan.alone_only,
            "prior": {"mains": mains, "drafts": drafts, "runs": {f"{mf}/{df}": r for (mf, df), r in runs.items()}},
        }, what=f"measuring the main model ({fmt})")
        borrowed = {df: runs[(answered_by, df)] for df in drafts if (answered_by, df) in runs} if not answer else {}
        for df, r in {**measured["runs"], **borrowed}.items():
            if df in drafts:
                runs[(fmt, df)] = r
        if answer and measured["runs"]:
            answered_by = answered_by or fmt
        if "answers" in measured:
            answers[fmt] = measured["answers"]
        if "reads" in measured:
            reads[fmt] = measured["reads"]
        mains[fmt] = {k: v for k, v in measured.items() if k not in ("runs", "answers", "reads", "precision")}
        measured_precision = measured.get("precision", measured_precision)
    check_stop()
    # The activation precision every pipeline below (and the app's) is built with.
    chosen_precision = precision.choose(measured_precision, min(d["step_s"]["fair"] for d in drafts.values()),
                                        precision.measured_format(main_formats))
    at = chosen_precision["choice"]
    report(f"activation precision: {chosen_precision['reason']}")

    quality, too_far, usable_mains = quality_gate(reads, main_formats, mains, report)

    no_room = DemoError(f"No format pair of {preset.name!r} fits in {gb(budget)} of memory; "
                        "free memory or choose a smaller preset.")
    if all(m["memory_bytes"] + d["memory_bytes"] > budget for m in usable_mains.values() for d in drafts.values()):
        raise no_room  # before timing anything more: not even fair mode's smallest pair fits

    # What this machine does WITHOUT a draft, per mode: every usable main format's real
    # baseline pipeline, interleaved. The baseline a visitor sees is the fastest of them.
    # With llama-cpp-python installed, its plain decoding of the same GGUF joins the fair
    # rotation as a reference ("faster than what a visitor would use instead").
    plain, plain_pick = {}, {}
    timed_alone = plain_contenders(usable_mains)
    for f in usable_mains:
        if f not in timed_alone:
            report(f"main model {f} is over {PLAIN_MARGIN}× slower a token than the fastest format: not timed alone")
    llama_gguf = None if "plain:fair" in stages.done else llamacpp.reference_gguf(preset, store)
    try:
        for mode, n in threads.items():
            check_stop()
            if mode == "race":  # a format far behind with the whole machine is not timed again
                paged = {f: r for f, r in plain["fair"]["rates"].items() if split_plain_key(f)[1] == "PA"}
                timed_alone, behind = race_contenders(paged, timed_alone), timed_alone
                for f in set(behind) - set(timed_alone):
                    report(f"main model {f} alone ran under 1/{RACE_MARGIN} of the fastest format's rate with the "
                           "whole machine: not timed alone with race threads")
                if len(timed_alone) == 1:  # nothing to choose: timed beside the speculative pipeline, below
                    continue
            plain[mode] = stages.run(f"plain:{mode}", "measure_plain", {
                "folders": {f: str(folders[("main", f)]) for f in timed_alone}, "threads": n,
                "texts": texts[:plan.plain_prompts], "max_new_tokens": plan.plain_new_tokens, "rounds": plan.plain_rounds,
                "precision": at,
                # Fair mode: each main alone on both attention backends, the stateful one too (a
                # Zen 5 ran it at 0.97-1.14x paged attention's rate): the baseline is the fastest
                # plain configuration where clearly so (cost_model.paged_unless_clearly_slower). A race
                # keeps the scheduler on both sides.
                "attentions": list(BASELINE_ATTENTIONS) if mode == "fair" else ["PA"],
                "llama_gguf": str(llama_gguf) if llama_gguf and mode == "fair" else None},
                what=f"timing the main model alone ({mode} threads)")
    finally:
        if llama_gguf is not None:
            llama_gguf.unlink(missing_ok=True)
    for mode in threads:
        if mode not in plain:  # one format left: the race baseline, its rate timed in the race below
            plain_pick[mode] = {"main_format": timed_alone[0], "ties": list(timed_alone)}
            continue
        if not any(plain[mode]["rates"].values()):
            raise DemoError(f"No main format of {preset.name!r} runs alone on this CPU with {mode} threads; "
                            "run python -m demo.doctor to see which configurations crash.")
        rates = {f: r for f, r in plain[mode]["rates"].items() if r}
        plain_pick[mode] = paged_unless_clearly_slower(plain_choice(rates), rates)
        if plain_pick[mode].get("stateful_ratios"):
            verdict = ("the baseline runs on it" if split_plain_key(plain_pick[mode]["main_format"])[1] != "PA"
                       else "the baseline keeps paged attention")
            report(f"the main alone on the stateful backend (SDPA) ran "
                   f"{', '.join(f'{r:.2f}' for r in plain_pick[mode]['stateful_ratios'])}× its rate on paged attention "
                   f"(paired; {1 + STATEFUL_MARGIN:.2f}× needed in every pair): {verdict}")

    def baseline_of(mode: str, main_format: str) -> str:
        """The plain configuration (calibration_result.plain_key) the baseline runs in `mode` beside a
        pair on `main_format`: the pair's own main on paged attention when it ties with the
        fastest without a draft (same weights, same backend on both sides), else the fastest."""
        return main_format if main_format in plain_pick[mode]["ties"] else plain_pick[mode]["main_format"]

    def candidates_for(mode: str, overhead_of: Callable[[tuple], Optional[dict]]) -> list[dict]:
        """Every configuration of `mode`, each pair predicted with overhead_of(pair): a real
        pipeline's timing (measure.pipeline_overhead), or None for the bare model."""
        out = []
        for mf, m in usable_mains.items():
            if m["dominated"] or mode not in m["verify_s"]:
                continue
            for df, d in drafts.items():
                if mode not in d["step_s"] or (mf, df) not in runs:
                    continue
                # A race holds both pipelines, each compiling the main model; fair mode needs
                # one at a time when both do not fit (PipelineCache.in_turn): main + draft.
                plain_main = mains[split_plain_key(plain_pick[mode]["main_format"])[0]]["memory_bytes"]
                need = (m["memory_bytes"] + plain_main if mode == "race" else m["memory_bytes"]) + d["memory_bytes"]
                o = overhead_of((mf, df))
                overhead = (o["per_step_s"], o["per_guess_s"]) if o else (0.0, 0.0)
                extra = {int(k): v for k, v in o["extra_s"].items()} if o else None
                for k in range(1, k_max + 1):
                    p = predict(m["verify_s"][mode], d["step_s"][mode], runs[(mf, df)], k, overhead,
                                o["baseline_overhead_s"] if o else 0.0, extra)
                    out.append({"main_format": mf, "draft_format": df, "mode": mode, **p,
                                "memory_bytes": need, "fits": need <= budget})
        return out

    def fitting(pool: list[dict]) -> list[dict]:
        out = [c for c in pool if c["fits"]]
        if not pool:
            raise DemoError(f"No format pair of {preset.name!r} runs on this CPU in both modes; "
                            "run python -m demo.doctor to see which configurations crash.")
        if not out:
            raise no_room
        return out

    # Per mode: the model's best configuration runs in a real pipeline, which gives the
    # overhead per step the model lacks; every configuration is then predicted with it, and
    # the pair that wins is timed in its own real pipeline too before it is chosen
    # (choose_timed), so the choice never rests on another pair's overhead.
    candidates, choice, overheads, timed_pairs = [], {}, {}, {}
    ks = overhead_ks(k_max, plan.overhead_at_k1)
    for mode, n in threads.items():

        def time_pipeline(pair: tuple, mode: str = mode, n: Optional[int] = n) -> dict:
            check_stop()
            report(f"timing a real speculative pipeline ({mode} threads): main {pair[0]}, draft {pair[1]}, "
                   f"K={', '.join(map(str, ks))}")
            m, d = mains[pair[0]], drafts[pair[1]]
            name, what = f"overhead:{mode}:{pair[0]}/{pair[1]}", f"timing a real speculative pipeline ({mode} threads)"
            args = {
                "pair": list(pair), "main_folder": str(folders[("main", pair[0])]),
                "draft_folder": str(folders[("draft", pair[1])]),
                "texts": (texts if mode == "fair" else texts[:1])[:plan.overhead_prompts],
                "max_new_tokens": ((plan.race_overhead_new_tokens if mode == "race" else None)
                                   or plan.overhead_new_tokens or max_new_tokens), "threads": n, "ks": list(ks),
                "precision": at,
                "predicted_step_s": {str(k): predict(m["verify_s"][mode], d["step_s"][mode], runs[pair], k)["step_s"]
                                     for k in ks},
                "one_token_s": m["verify_s"][mode][0],
                # Race mode: the baseline beside it, as a race runs them (demo.calibrate.beside);
                # fair mode: the same baseline pipeline, just timed alone.
                **({"beside": str(folders[("main", split_plain_key(baseline_of(mode, pair[0]))[0])])} if mode == "race" else
                   {"baseline_step_s": 1 / cost_model_median(plain[mode]["rates"][pair[0]])
                    if plain[mode]["rates"].get(pair[0]) else None})}
            if mode == "race" and race_pair is not None:  # the app's own race pipelines: warm at Ready
                try:
                    return stages.run_here(name, lambda: measure_overhead(args, lambda m: None, race_pair(
                        args["main_folder"], args["draft_folder"], args["beside"], n, precision=at)), what)
                except DemoError as e:
                    report(f"the app's own race pipelines could not be timed ({e}); timing them in a child instead")
            return stages.run(name, "measure_overhead", args, what=what)

        first = max(fitting(candidates_for(mode, lambda pair: None)), key=lambda c: c["speculative_tok_s"])
        choice[mode], pool, timed = choose_timed(
            (first["main_format"], first["draft_format"]), time_pipeline,
            lambda overhead_of, mode=mode: fitting(candidates_for(mode, overhead_of)),
            lambda pool, mode=mode: pick_among_fastest(pool, [split_plain_key(t)[0] for t in plain_pick[mode]["ties"]]))
        candidates += pool
        overheads[mode] = timed[pair_of(choice[mode])]
        timed_pairs[mode] = {f"{mf}/{df}": o for (mf, df), o in timed.items()}
    # The baseline of each mode: the chosen pair's own main when it ties with the fastest
    # without a draft (same weights on both sides), else the fastest itself.
    baseline = {}
    for mode in plain_pick:
        key = baseline_of(mode, choice[mode]["main_format"])
        rates = overheads[mode].get("baseline_rates") or plain[mode]["rates"][key]  # race mode: as it raced
        fmt, attention = split_plain_key(key)
        baseline[mode] = {"main_format": fmt, "attention": attention, "baseline_tok_s": cost_model_median(rates)}
    if "race" not in plain:  # not timed alone (one format left): its rates beside the chosen pair
        plain["race"] = {"rates": {baseline["race"]["main_format"]: overheads["race"]["baseline_rates"]},
                         "interleaved": False, "beside": "/".join(pair_of(choice["race"]))}
    result = Calibration.model_validate({
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
        # Every pair whose real pipeline was timed, per mode (the chosen one among them).
        "pipeline_overheads": timed_pairs,
        "candidates": candidates,
        "choice": choice,
        # Measured, fair threads: the fastest main format alone (kept for older readers).
        "fastest_alone": dict(zip(("main_format", "attention"), split_plain_key(plain_pick["fair"]["main_format"])),
                              baseline_tok_s=plain_pick["fair"]["baseline_tok_s"]),
        "plain": plain,
        "baseline": baseline,
        "quality": quality,
        "min_agreement": MIN_AGREEMENT,
        "precision": chosen_precision,
        # Configurations that crashed OpenVINO on this machine, skipped (demo.engine.safety),
        # and formats too far from the original weights.
        "skipped": stages.skipped(list(folders.values())) + too_far,
    })
    path = write_atomic(cache_path(store, preset.name, fp), result.to_json())
    stages.finish()
    return result.model_copy(update={"path": str(path)})
