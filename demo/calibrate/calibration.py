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
from ..models.folders import weight_bytes
from ..models.sources import has_formats
from .cost_model import median as cost_model_median
from .cost_model import (PLAIN_MARGIN, RACE_MARGIN, STATEFUL_MARGIN, choose_timed, overhead_ks, pair_of,
                         paged_unless_clearly_slower, pick_among_fastest, plain_choice, plain_contenders, predict,
                         race_contenders)
from ..core.machine import others_busy
from .measure import quality_gate
from .plan import FULL, LAUNCH, Plan  # noqa: F401 (calibration.LAUNCH is the launch's plan)
from ..core.files import write_atomic
from . import precision
from .state import Chosen, Found, Report, Setup, saved

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
    from ..core.memory import budget_bytes
    from ..core.settings import race_threads
    from ..engine.native_guard import SafetyRecord
    from .stages import StageRunner

    check_calibratable(preset)
    started = time.time()
    texts = list(prompts) if prompts else [p.text for p in named(CALIBRATION_SET)]
    threads = {"fair": None, "race": race_threads()}
    folders = prepare_candidates(preset, store, main_formats, draft_formats, report, stop)
    if stop is not None and stop.is_set():
        raise DemoError("Calibration was stopped; what was measured so far is kept.")
    busy_before = others_busy()
    fp = fingerprint(preset, store)
    identity = {"version": CALIBRATION_VERSION, "fingerprint": fp, "main": list(main_formats),
                "draft": list(draft_formats), "k_max": k_max, "texts": texts, "new": max_new_tokens,
                "module": stages_module, "plan": asdict(plan), "stages": STAGES_VERSION}
    stages = StageRunner(stages_path(store, preset.name, fp), identity, SafetyRecord(store.cache_dir), report, stop,
                         **({"slot": slot} if slot is not None else {}), module=stages_module)
    if stages.resumed:
        report(f"resuming calibration: {stages.resumed} stages were measured before a restart")
    s = Setup(preset, store, main_formats, draft_formats, k_max, texts, max_new_tokens,
              budget_bytes() if budget is None else budget, plan, threads, folders, stages, report, stop, race_pair)
    refuse_when_no_pair_can_fit(s)
    found = Found(drafts=measure_drafts(s))
    measure_mains(s, found)
    choose_precision_and_quality(s, found)
    time_plain(s, found)
    chosen = choose(s, found)
    result = saved(s, found, chosen, started=started, busy_before=busy_before, fp=fp)
    path = write_atomic(cache_path(store, preset.name, fp), result.to_json())
    stages.finish()
    return result.model_copy(update={"path": str(path)})


# -- the steps, in order ------------------------------------------------------------------

def refuse_when_no_pair_can_fit(s: Setup) -> None:
    """Before measuring anything: a loaded model holds at least its weight file, so when the
    smallest main's and the smallest draft's files together exceed the budget, no pair can
    fit and minutes of measuring would end in the same sentence (choose_precision_and_quality
    refuses later on the measured sizes)."""
    smallest = [min(weight_bytes(folder) for (r, _), folder in s.folders.items() if r == role)
                for role in ("main", "draft")]
    if sum(smallest) > s.budget:
        raise s.no_room()


def check_calibratable(preset) -> None:
    if preset.draft is None:
        raise DemoError(f"Preset {preset.name!r} has no draft model; there is nothing to calibrate.")
    if not (has_formats(preset.main) and has_formats(preset.draft)):
        raise DemoError(f"Calibration chooses the weight formats of pypi and gguf pairs, and {preset.name!r} is used "
                        f"as shipped; measure its K with python -m demo.bench --preset {preset.name} "
                        "--assistant-tokens 2,3,4,5.")


def measure_drafts(s: Setup) -> dict:
    """Each draft format's cost a guess; those that run with OpenVINO's default threads."""
    drafts, measured_drafts = {}, s.stages.run("drafts", "measure_drafts", {
        "folders": {fmt: str(s.folders[("draft", fmt)]) for fmt in s.draft_formats}, "threads": s.threads,
        "repeats": s.plan.draft_repeats}, what="measuring the draft models")
    for fmt, measured in measured_drafts.items():
        if "fair" in measured["step_s"]:  # the draft's fair model also guesses along the answers
            drafts[fmt] = measured
        else:
            s.report(f"draft model {fmt} cannot run here with OpenVINO's default threads: not a candidate")
    if not drafts:
        raise DemoError(f"No draft format of {s.preset.name!r} runs on this CPU; run python -m demo.doctor to see why.")
    return drafts


def measure_mains(s: Setup, found: Found) -> None:
    """Each main format's verify-cost curve and memory, and how far each draft guesses right along
    the greedy answers (every main's, or the first's when the plan borrows them)."""
    for fmt in s.main_formats:
        s.check_stop()
        answer = s.plan.acceptance_per_main or found.answered_by is None
        measured = s.stages.run(f"main:{fmt}", "measure_main", {
            "folder": str(s.folders[("main", fmt)]), "format": fmt, "threads": s.threads, "k_max": s.k_max,
            "texts": s.texts, "max_new_tokens": s.max_new_tokens, "sparse_fair": s.plan.sparse_fair,
            "repeats": s.plan.repeats, "answer": answer, "read_along": found.answers.get(found.answered_by),
            "drafts": {df: str(s.folders[("draft", df)]) for df in found.drafts},
            "precision": fmt == precision.measured_format(s.main_formats), "alone_only": fmt in s.plan.alone_only,
            "prior": {"mains": found.mains, "drafts": found.drafts,
                      "runs": {f"{mf}/{df}": r for (mf, df), r in found.runs.items()}},
        }, what=f"measuring the main model ({fmt})")
        borrowed = ({df: found.runs[(found.answered_by, df)] for df in found.drafts
                     if (found.answered_by, df) in found.runs} if not answer else {})
        for df, r in {**measured["runs"], **borrowed}.items():
            if df in found.drafts:
                found.runs[(fmt, df)] = r
        if answer and measured["runs"]:
            found.answered_by = found.answered_by or fmt
        if "answers" in measured:
            found.answers[fmt] = measured["answers"]
        if "reads" in measured:
            found.reads[fmt] = measured["reads"]
        found.mains[fmt] = {k: v for k, v in measured.items() if k not in ("runs", "answers", "reads", "precision")}
        found.measured_precision = measured.get("precision", found.measured_precision)
    s.check_stop()


def choose_precision_and_quality(s: Setup, found: Found) -> None:
    """The activation precision every pipeline below (and the app's) is built with, and the main
    formats close enough to the original weights; refused early when not even fair mode's
    smallest pair fits the memory."""
    found.precision = precision.choose(found.measured_precision, min(d["step_s"]["fair"] for d in found.drafts.values()),
                                       precision.measured_format(s.main_formats))
    s.report(f"activation precision: {found.precision['reason']}")
    found.quality, found.too_far, found.usable_mains = quality_gate(found.reads, s.main_formats, found.mains, s.report)
    if all(m["memory_bytes"] + d["memory_bytes"] > s.budget
           for m in found.usable_mains.values() for d in found.drafts.values()):
        raise s.no_room()  # before timing anything more


def time_plain(s: Setup, found: Found) -> None:
    """What this machine does WITHOUT a draft, per mode: every usable main format's real baseline
    pipeline, interleaved; the baseline a visitor sees is the fastest of them. With
    llama-cpp-python installed, its plain decoding of the same GGUF joins the fair rotation as a
    reference ("faster than what a visitor would use instead")."""
    from ..engine import llamacpp

    timed_alone = plain_contenders(found.usable_mains)
    for f in found.usable_mains:
        if f not in timed_alone:
            s.report(f"main model {f} is over {PLAIN_MARGIN}× slower a token than the fastest format: not timed alone")
    llama_gguf = None if "plain:fair" in s.stages.done else llamacpp.reference_gguf(s.preset, s.store)
    try:
        for mode, n in s.threads.items():
            s.check_stop()
            if mode == "race":  # a format far behind with the whole machine is not timed again
                paged = {f: r for f, r in found.plain["fair"]["rates"].items() if split_plain_key(f)[1] == "PA"}
                timed_alone, behind = race_contenders(paged, timed_alone), timed_alone
                for f in set(behind) - set(timed_alone):
                    s.report(f"main model {f} alone ran under 1/{RACE_MARGIN} of the fastest format's rate with the "
                             "whole machine: not timed alone with race threads")
                if len(timed_alone) == 1:  # nothing to choose: timed beside the speculative pipeline, below
                    continue
            found.plain[mode] = s.stages.run(f"plain:{mode}", "measure_plain", {
                "folders": {f: str(s.folders[("main", f)]) for f in timed_alone}, "threads": n,
                "texts": s.texts[:s.plan.plain_prompts], "max_new_tokens": s.plan.plain_new_tokens,
                "rounds": s.plan.plain_rounds, "precision": found.precision["choice"],
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
    for mode in s.threads:
        found.plain_pick[mode] = pick_plain(s, found.plain.get(mode), mode, timed_alone)


def pick_plain(s: Setup, plain: Optional[dict], mode: str, timed_alone: list) -> dict:
    """The fastest plain configuration of `mode` and those it ties with."""
    if plain is None:  # one format left: the race baseline, its rate timed in the race below
        return {"main_format": timed_alone[0], "ties": list(timed_alone)}
    if not any(plain["rates"].values()):
        raise DemoError(f"No main format of {s.preset.name!r} runs alone on this CPU with {mode} threads; "
                        "run python -m demo.doctor to see which configurations crash.")
    rates = {f: r for f, r in plain["rates"].items() if r}
    paired = plain.get("interleaved", True)  # timed one after another: no tie is claimed
    pick = paged_unless_clearly_slower(plain_choice(rates, paired), rates, paired)
    if pick.get("stateful_ratios"):
        verdict = ("the baseline runs on it" if split_plain_key(pick["main_format"])[1] != "PA"
                   else "the baseline keeps paged attention")
        s.report(f"the main alone on the stateful backend (SDPA) ran "
                 f"{', '.join(f'{r:.2f}' for r in pick['stateful_ratios'])}× its rate on paged attention "
                 f"({'paired' if paired else 'medians, not interleaved'}; {1 + STATEFUL_MARGIN:.2f}× needed in every pair): "
                 f"{verdict}")
    return pick


def candidates_for(s: Setup, found: Found, mode: str, overhead_of: Callable[[tuple], Optional[dict]]) -> list[dict]:
    """Every configuration of `mode`, each pair predicted with overhead_of(pair): a real
    pipeline's timing (measure.pipeline_overhead), or None for the bare model."""
    out = []
    plain_main = found.mains[split_plain_key(found.plain_pick[mode]["main_format"])[0]]["memory_bytes"]
    for mf, m in found.usable_mains.items():
        if m["dominated"] or mode not in m["verify_s"]:
            continue
        for df, d in found.drafts.items():
            if mode not in d["step_s"] or (mf, df) not in found.runs:
                continue
            # A race holds both pipelines, each compiling the main model; fair mode needs
            # one at a time when both do not fit (PipelineCache.in_turn): main + draft.
            need = (m["memory_bytes"] + plain_main if mode == "race" else m["memory_bytes"]) + d["memory_bytes"]
            o = overhead_of((mf, df))
            overhead = (o["per_step_s"], o["per_guess_s"]) if o else (0.0, 0.0)
            extra = {int(k): v for k, v in o["extra_s"].items()} if o else None
            for k in range(1, s.k_max + 1):
                p = predict(m["verify_s"][mode], d["step_s"][mode], found.runs[(mf, df)], k, overhead,
                            o["baseline_overhead_s"] if o else 0.0, extra)
                out.append({"main_format": mf, "draft_format": df, "mode": mode, **p,
                            "memory_bytes": need, "fits": need <= s.budget})
    return out


def fitting(s: Setup, pool: list[dict]) -> list[dict]:
    out = [c for c in pool if c["fits"]]
    if not pool:
        raise DemoError(f"No format pair of {s.preset.name!r} runs on this CPU in both modes; "
                        "run python -m demo.doctor to see which configurations crash.")
    if not out:
        raise s.no_room()
    return out


def time_pipeline(s: Setup, found: Found, mode: str, ks: Sequence[int], pair: tuple) -> dict:
    """One pair's real speculative pipeline at each K of `ks`: its step against the model's."""
    from .stages import measure_overhead

    s.check_stop()
    n = s.threads[mode]
    s.report(f"timing a real speculative pipeline ({mode} threads): main {pair[0]}, draft {pair[1]}, "
             f"K={', '.join(map(str, ks))}")
    m, d = found.mains[pair[0]], found.drafts[pair[1]]
    name, what = f"overhead:{mode}:{pair[0]}/{pair[1]}", f"timing a real speculative pipeline ({mode} threads)"
    args = {
        "pair": list(pair), "main_folder": str(s.folders[("main", pair[0])]),
        "draft_folder": str(s.folders[("draft", pair[1])]),
        "texts": (s.texts if mode == "fair" else s.texts[:1])[:s.plan.overhead_prompts],
        "max_new_tokens": ((s.plan.race_overhead_new_tokens if mode == "race" else None)
                           or s.plan.overhead_new_tokens or s.max_new_tokens), "threads": n, "ks": list(ks),
        "precision": found.precision["choice"],
        "predicted_step_s": {str(k): predict(m["verify_s"][mode], d["step_s"][mode], found.runs[pair], k)["step_s"]
                             for k in ks},
        "one_token_s": m["verify_s"][mode][0],
        # Race mode: the baseline beside it, as a race runs them (demo.calibrate.beside);
        # fair mode: the same baseline pipeline, just timed alone.
        **({"beside": str(s.folders[("main", split_plain_key(found.baseline_of(mode, pair[0]))[0])])}
           if mode == "race" else
           {"baseline_step_s": 1 / cost_model_median(found.plain[mode]["rates"][pair[0]])
            if found.plain[mode]["rates"].get(pair[0]) else None})}
    if mode == "race" and s.race_pair is not None:  # the app's own race pipelines: warm at Ready
        try:
            return s.stages.run_here(name, lambda: measure_overhead(args, lambda m: None, s.race_pair(
                args["main_folder"], args["draft_folder"], args["beside"], n, precision=found.precision["choice"])),
                what)
        except DemoError as e:
            s.report(f"the app's own race pipelines could not be timed ({e}); timing them in a child instead")
    return s.stages.run(name, "measure_overhead", args, what=what)


def choose(s: Setup, found: Found) -> Chosen:
    """Per mode: the model's best configuration runs in a real pipeline, which gives the overhead
    per step the model lacks; every configuration is then predicted with it, and the pair that
    wins is timed in its own real pipeline too before it is chosen (choose_timed), so the choice
    never rests on another pair's overhead. Then each mode's baseline: the chosen pair's own main
    when it ties with the fastest without a draft (same weights on both sides), else the fastest."""
    chosen = Chosen()
    ks = overhead_ks(s.k_max, s.plan.overhead_at_k1)
    for mode in s.threads:
        first = max(fitting(s, candidates_for(s, found, mode, lambda pair: None)), key=lambda c: c["speculative_tok_s"])
        choice, pool, timed = choose_timed(
            (first["main_format"], first["draft_format"]), lambda pair, mode=mode: time_pipeline(s, found, mode, ks, pair),
            lambda overhead_of, mode=mode: fitting(s, candidates_for(s, found, mode, overhead_of)),
            lambda pool, mode=mode: pick_among_fastest(pool, [split_plain_key(t)[0] for t in found.plain_pick[mode]["ties"]]))
        chosen.choice[mode] = choice
        chosen.candidates += pool
        chosen.overheads[mode] = timed[pair_of(choice)]
        chosen.timed_pairs[mode] = {f"{mf}/{df}": o for (mf, df), o in timed.items()}
    overheads, plain = chosen.overheads, found.plain
    for mode in found.plain_pick:
        key = found.baseline_of(mode, chosen.choice[mode]["main_format"])
        rates = overheads[mode].get("baseline_rates") or plain[mode]["rates"][key]  # race mode: as it raced
        fmt, attention = split_plain_key(key)
        chosen.baseline[mode] = {"main_format": fmt, "attention": attention, "baseline_tok_s": cost_model_median(rates)}
    if "race" not in plain:  # not timed alone (one format left): its rates beside the chosen pair
        plain["race"] = {"rates": {chosen.baseline["race"]["main_format"]: overheads["race"]["baseline_rates"]},
                         "interleaved": False, "beside": "/".join(pair_of(chosen.choice["race"]))}
    return chosen
