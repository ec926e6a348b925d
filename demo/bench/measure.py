"""The measurement: every configuration warmed up once, then every prompt × repeat, both
sides per repeat (alone in turn for fair, at once for race), one sample each (run_bench).

The result is a BenchResult (demo.bench.result: the JSON form `--json` writes, typed);
demo.bench.report aggregates and prints it, demo.bench.plot draws it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

from ..core.bench_prompts import BenchPrompt, select
from ..core.errors import DemoError
from ..core.machine import machine_info, versions
from ..core.metrics import compare
from ..core.settings import GenerationSettings, PipelineOptions, cpu_cores, race_threads
from ..core.streaming import BASELINE, SPECULATIVE
from ..models.presets import Preset
from .curves import add_curves, sample_curve
from .plan import METHOD_LABELS, MODES, Config, normalize_modes, weights_label
from .report import aggregate
from .result import BenchResult

# progress(done, total, message): `done` of `total` runs (warm-ups included) are finished.
Progress = Callable[[int, int, str], None]


def _no_progress(done: int, total: int, message: str) -> None:
    pass


class _Stopped(Exception):
    """The caller's stop event was set."""


def run_bench(
    preset: Optional[str] = None,
    *,
    modes: Sequence[str] = MODES,
    assistant_tokens: Optional[Sequence[int]] = None,
    prompt_lookup: bool = False,
    methods: Optional[Sequence[str]] = None,
    repeat: int = 3,
    prompt_classes: Optional[Sequence[str]] = None,
    max_new_tokens: int = 128,
    limit_prompts: Optional[int] = None,
    exact: bool = False,
    cache_dir: Optional[Path] = None,
    models: Optional[Path] = None,
    prompts: Optional[Sequence[BenchPrompt]] = None,
    arena=None,
    progress: Progress = _no_progress,
    stop: Optional[threading.Event] = None,
    race_thread_count: Optional[int] = None,
    formats: Optional[Sequence[tuple]] = None,
    tree: Optional[tuple[int, int]] = None,
) -> BenchResult:
    """Measure and return the result (BenchResult; report.write_json writes it).

    `assistant_tokens` defaults to the preset's K; `tree` (branching factor, depth) makes an
    EAGLE-3 head draft a tree at every K; `prompts` overrides the built-in set
    (then `prompt_classes` and `limit_prompts` are ignored); `arena` reuses an engine
    (and its loaded pipelines), else one is made from `models` and `cache_dir` that keeps
    only one pipeline pair loaded at a time. Setting `stop`, or Ctrl-C, ends the
    measurement early: the result then holds what was measured, with `interrupted` True.
    """
    started = time.time()
    modes = normalize_modes(modes)
    if repeat < 1:
        raise DemoError("Repeat each prompt at least once (--repeat 1 or more).")
    chosen = list(prompts) if prompts is not None else select(prompt_classes, limit_prompts)
    if not chosen:
        raise DemoError("No prompts to run; choose at least one prompt class.")
    if arena is None:
        arena = _make_arena(models, cache_dir)
    preset_obj = arena.presets.get(preset)
    ks = list(dict.fromkeys(assistant_tokens or [arena.default_assistant_tokens(preset_obj.name)]))
    plan = _Plan(preset_obj, modes, _methods(preset_obj, methods, prompt_lookup, tree), ks, chosen,
                 list(dict.fromkeys(formats or [(None, None)])), repeat, max_new_tokens, exact, tree, race_thread_count)
    plan.check_settings()
    result = _header(plan, started, limit_prompts)
    counter = _Counter(progress, len(plan.configs()) * plan.per_config)
    stop = stop or threading.Event()
    try:
        for fmt in plan.format_pairs:
            _measure_weights(arena, plan, fmt, result, counter, stop)
    except (KeyboardInterrupt, _Stopped):
        result["interrupted"] = True
    _raise_when_nothing_ran(result)
    finished = time.time()
    result["finished_at"] = _iso(finished)
    result["duration_s"] = round(finished - started, 3)
    result["aggregates"] = add_curves(aggregate(result["samples"]), result["samples"])
    return BenchResult.model_validate(result)  # built as its JSON form, checked against the model


@dataclass
class _Plan:
    """What one benchmark runs: every weights × mode × method × K, each prompt `repeat` times."""

    preset: Preset
    modes: list
    methods: list
    ks: list
    prompts: list
    format_pairs: list
    repeat: int
    max_new_tokens: int
    exact: bool
    tree: Optional[tuple[int, int]]
    race_thread_count: Optional[int]

    @property
    def per_config(self) -> int:
        return 1 + len(self.prompts) * self.repeat  # one warm-up, then every prompt × repeat

    def configs(self) -> list:
        return [Config(m, meth, k, weights_label(f)) for f in self.format_pairs for m in self.modes
                for meth in self.methods for k in self.ks]

    def check_settings(self) -> None:
        """Every K with every method, before anything loads (with a tree: at least its depth, at most its guesses)."""
        for k in self.ks:
            for method in self.methods:
                self.settings(method, k)

    def settings(self, method: str, k: int) -> GenerationSettings:
        b, d = self.tree if self.tree is not None and method == "eagle3" else (None, None)
        return GenerationSettings(max_new_tokens=self.max_new_tokens, method=method, assistant_tokens=k,
                                  branching_factor=b, tree_depth=d).validated()


class _Counter:
    """Runs done of the total (warm-ups included), for `progress`."""

    def __init__(self, progress: Progress, total: int):
        self.progress, self.total, self.done = progress, total, 0

    def __call__(self, message: str) -> None:
        self.progress(self.done, self.total, message)


def _methods(preset: Preset, methods: Optional[Sequence[str]], prompt_lookup: bool,
             tree: Optional[tuple[int, int]]) -> list:
    """`methods` as asked; else a draft model's or a head's method (Preset.default_method), then
    prompt lookup if asked."""
    if methods:
        chosen = list(dict.fromkeys(methods))
    else:
        chosen = ([preset.default_method] if preset.draft is not None else []) + (["prompt_lookup"] if prompt_lookup else [])
    if tree is not None and "eagle3" not in chosen:
        raise DemoError(f"Tree drafting (--tree) needs an EAGLE-3 head, and the draft of {preset.name!r} is not one; "
                        "choose a preset whose draft is a head, or leave --tree out.")
    if not chosen:
        raise DemoError(f"Preset {preset.name!r} has no draft model; add --prompt-lookup to measure prompt lookup.")
    return chosen


def _header(plan: _Plan, started: float, limit_prompts: Optional[int]) -> dict:
    preset = plan.preset
    return {
        "bench_version": 1,
        "started_at": _iso(started),
        "machine": machine_info(),
        "versions": versions(),
        "preset": {
            "name": preset.name,
            "description": preset.description,
            "main": _model_by_name(preset.main.model_dump()),
            "draft": _model_by_name(preset.draft.model_dump()) if preset.draft is not None else None,
            "assistant_tokens": preset.assistant_tokens,
        },
        "settings": {
            "modes": list(plan.modes),
            "methods": plan.methods,
            "assistant_tokens": plan.ks,
            "weights": [weights_label(f) for f in plan.format_pairs],
            "repeat": plan.repeat,
            "max_new_tokens": plan.max_new_tokens,
            "prompt_classes": list(dict.fromkeys(p.cls for p in plan.prompts)),
            "limit_prompts": limit_prompts,
            "exact": plan.exact,
            "tree": None if plan.tree is None else {"branching_factor": plan.tree[0], "tree_depth": plan.tree[1]},
            "greedy": True,
            "max_ngram_size": GenerationSettings().max_ngram_size,
            "race_threads_per_pipeline": plan.race_thread_count if plan.race_thread_count is not None else race_threads(),
            "cores": cpu_cores(),
            "warmup_runs_per_config": 1,
            "std": "sample standard deviation (n-1); 0 for a single sample",
        },
        "prompts": [{"id": p.id, "class": p.cls, "text": p.text} for p in plan.prompts],
        "configs": [],
        "samples": [],
        "errors": [],
        "aggregates": [],
        "interrupted": False,
        "weights": {},
    }


def _measure_weights(arena, plan: _Plan, fmt: tuple, result: dict, counter: _Counter, stop: threading.Event) -> None:
    """One weight-format pair: prepared, then each mode × method loaded once and every K run on it."""
    weights = weights_label(fmt)
    counter(f"preparing models ({weights})")
    pair = arena.prepare(plan.preset.name, lambda m: counter(f"preparing: {m}"), stop,
                         main_format=fmt[0], draft_format=fmt[1])
    # The prepared folders by name only: the JSON is handed to visitors (the Benchmark tab).
    folders = {"main_folder": pair.main.name, "draft_folder": pair.draft.name if pair.draft is not None else None}
    result["preset"].update(folders)
    result["weights"][weights] = {"main_format": pair.main_format, "draft_format": pair.draft_format, **folders}
    for mode in plan.modes:
        for method in plan.methods:
            runners = None  # let the cache drop the previous pair before loading the next
            options = PipelineOptions(exact=plan.exact)
            request = _request(plan.preset.name, mode, method, plan.ks[0], plan.max_new_tokens, options,
                               plan.race_thread_count, fmt)
            try:
                runners = arena.runners(request, lambda m: counter(f"{weights} {mode} {METHOD_LABELS[method]}: {m}"))
            except DemoError as e:
                # Keep what other configurations measured; fail only if nothing ran (_raise_when_nothing_ran).
                for k in plan.ks:
                    result["errors"].append({**Config(mode, method, k, weights).as_dict(), "stage": "load",
                                             "errors": {"pipelines": str(e)}})
                counter.done += plan.per_config * len(plan.ks)
                counter(f"{mode} {METHOD_LABELS[method]}: failed to load")
                continue
            ran = arena.prepared(request)
            if ran is not None and ran.baseline is not None:  # this mode's baseline is the fastest main alone
                result["weights"][weights][f"{mode}_baseline_format"] = ran.baseline_format
            _measure_ks(arena, plan, request, runners, weights, result, counter, stop)


def _measure_ks(arena, plan: _Plan, request, runners: dict, weights: str, result: dict, counter: _Counter,
                stop: threading.Event) -> None:
    """Every K on one loaded pair: a warm-up, then each prompt `repeat` times, a sample each."""
    from ..core.memory import rss_bytes
    from ..engine.arena import how_it_ran, threads_for

    mode, method = ("race" if request.mode == "race" else "fair"), request.settings.method
    threads = threads_for(request)
    loaded_rss = rss_bytes()  # the process with this pair loaded (and nothing else)
    for k in plan.ks:
        config = Config(mode, method, k, weights)
        settings = plan.settings(method, k)
        result["configs"].append({**config.as_dict(), "rss_loaded_bytes": loaded_rss, "threads_per_pipeline": threads,
                                  "how": how_it_ran(mode, request.options, method, threads,
                                                    arena.loads_in_turn(request))})
        counter(f"{config.label()}: warm-up")
        warm = _measure(runners, mode, plan.prompts[0].text, settings, stop)
        counter.done += 1
        failed = {s: r.error for s, r in warm.items() if r.error}
        if failed:
            result["errors"].append({**config.as_dict(), "stage": "warm-up", "errors": failed})
            counter.done += plan.per_config - 1  # skip this configuration, keep the others
            counter(f"{config.label()}: failed")
            continue
        for prompt in plan.prompts:
            for r in range(plan.repeat):
                counter(f"{config.label()}: {prompt.id} #{r + 1}")
                result["samples"].append(_sample(config, prompt, r, _measure(runners, mode, prompt.text, settings, stop)))
                counter.done += 1
        counter(f"{config.label()}: done")


def _raise_when_nothing_ran(result: dict) -> None:
    if result["errors"] and not result["samples"] and not result["interrupted"]:
        first = result["errors"][0]
        side, message = next(iter(first["errors"].items()))
        if first["stage"] == "load":
            raise DemoError(message)
        raise DemoError(f"The {side} pipeline failed during the warm-up run: {message.rstrip('.')}.")


def _make_arena(models: Optional[Path], cache_dir: Optional[Path]):
    from ..engine.arena import Arena
    from ..engine.pipelines import PipelineCache
    from ..models.presets import load_presets
    from ..models.sources import ModelStore

    # One pair in memory at a time: the bench loads each (mode, method) once, in order.
    return Arena(load_presets(models), ModelStore(cache_dir), PipelineCache(max_pairs=1))


def _request(preset: str, mode: str, method: str, k: int, max_new_tokens: int, options: PipelineOptions,
             race_thread_count: Optional[int] = None, formats: tuple = (None, None)):
    from ..engine.arena import RaceRequest

    settings = GenerationSettings(max_new_tokens=max_new_tokens, method=method, assistant_tokens=k)
    return RaceRequest(prompt="", preset=preset, settings=settings, options=options,
                       mode="race" if mode == "race" else "fair", race_threads=race_thread_count,
                       main_format=formats[0], draft_format=formats[1])


def _measure(runners: dict, mode: str, prompt: str, settings: GenerationSettings,
             stop: threading.Event) -> dict:
    """Run both sides once (alone one after the other, or at once); return side → RunResult."""
    from ..core.streaming import DoneEvent
    from ..engine.race import fair, race

    if stop.is_set():
        raise _Stopped
    # A fresh event per run: race() sets its stop event when it ends, so the caller's event
    # cannot be handed to it directly; it is relayed at every streamed chunk instead.
    run_stop = threading.Event()
    stream = race if mode == "race" else fair
    results: dict = {}
    for event in stream(runners, prompt, settings, run_stop):
        if stop.is_set():
            run_stop.set()
        if isinstance(event, DoneEvent):
            results[event.side] = event.result
    if stop.is_set():
        raise _Stopped  # a run cut short is not a sample
    return results


def _side(result, st) -> dict:
    return {
        "tokens": st.tokens,
        "elapsed_s": st.elapsed_s,
        "tokens_per_s": st.tokens_per_s,
        "ttft_s": st.ttft_s,
        "tpot_ms": st.tpot_ms,
        "steps": st.steps,
        "tokens_per_step": st.tokens_per_step,
        "ov_generated_tokens": result.ov_generated_tokens,
        "ov_ttft_ms": result.ov_ttft_ms,
        "ov_tpot_ms": result.ov_tpot_ms,
        "error": result.error,
    }


def _sample(config: Config, prompt: BenchPrompt, repeat: int, runs: dict) -> dict:
    base, spec = runs[BASELINE], runs[SPECULATIVE]
    c = compare(base, spec)
    b, s = _side(base, c.baseline), _side(spec, c.speculative)
    s["accepted"] = spec.ov_accepted_tokens   # OpenVINO's counts (None where it reports none)
    s["drafted"] = spec.ov_draft_tokens
    s["accepted_in_steps"] = c.speculative.accepted     # counted from the chunks: step size - 1
    s["acceptance_by_position"] = sample_curve(spec, config.assistant_tokens)  # demo.core.acceptance
    return {
        **config.as_dict(),
        "prompt_id": prompt.id,
        "class": prompt.cls,
        "repeat": repeat,
        BASELINE: b,
        SPECULATIVE: s,
        "acceptance_rate": c.acceptance_rate,
        "speedup": c.speedup,  # paired: both sides of this repeat
        "verdict": "failed" if c.failed else c.verdict,
    }


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(t))


def _model_by_name(model: dict) -> dict:
    """A preset's model as models.yaml says it, with a file or folder on this machine by name only."""
    out = dict(model)
    for key in ("path", "repo"):
        value = out.get(key)
        if isinstance(value, str) and (key == "path" or Path(value).is_absolute()):
            out[key] = Path(value).name
    return out
