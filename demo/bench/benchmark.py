"""Benchmark speculative decoding against the baseline over a built-in prompt set.

    python -m demo.bench --preset smollm2-self-draft --json bench.json --plot bench.png
    python -m demo.bench --preset NAME --mode fair --assistant-tokens 1,3,5,8 --prompt-lookup
    python -m demo.bench --preset NAME --prompts summarize --limit-prompts 2 --repeat 1

For every configuration (mode × method × assistant tokens K) both pipelines are warmed up
with one untimed full-length run, then every prompt runs --repeat times. Each repeat
measures the baseline and the speculative pipeline side by side, and the speedup is the
ratio within that repeat (paired), so slow phases of a noisy machine hit both sides.

Modes: fair (`sequential` is an alias: each pipeline alone with all cores, the honest ratio)
and race (both at once, the cores split evenly, what the live page shows).
Numbers are wall-clock from generate() to each token (demo.core.metrics); accepted and drafted
tokens are OpenVINO's own counts. The table goes to stdout, the progress bar to stderr,
every raw sample to --json, and a plot to --plot.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

from ..core.bench_prompts import CLASSES, BenchPrompt, select
from ..core.errors import DemoError, run_command
from ..core.machine import machine_info, versions
from ..core.metrics import compare
from ..core.settings import GenerationSettings, PipelineOptions, cpu_cores, race_threads
from ..core.streaming import BASELINE, SPECULATIVE
from ..core.files import write_atomic
from .curves import add_curves, plot_curves, sample_curve

MODES = ("fair", "race")
MODE_ALIASES = {"fair": "fair", "sequential": "fair", "race": "race"}  # "sequential": older name, older JSON
METHOD_LABELS = {"draft": "draft", "prompt_lookup": "lookup"}

# progress(done, total, message): `done` of `total` runs (warm-ups included) are finished.
Progress = Callable[[int, int, str], None]


def _no_progress(done: int, total: int, message: str) -> None:
    pass


@dataclass(frozen=True)
class Config:
    """One measured configuration: how the sides run and what the speculative side guesses with."""

    mode: str              # fair | race
    method: str            # draft | prompt_lookup
    assistant_tokens: int  # K
    weights: str = "preset"  # "MAIN/DRAFT" weight formats, or "preset" for models.yaml's

    def as_dict(self) -> dict:
        return {"mode": self.mode, "method": self.method, "assistant_tokens": self.assistant_tokens,
                "weights": self.weights}

    def label(self) -> str:
        return f"{self.weights} {self.mode} {METHOD_LABELS[self.method]} K={self.assistant_tokens}"


def parse_formats(text: Optional[str]) -> Optional[list[tuple[Optional[str], Optional[str]]]]:
    """'int8/gguf,f16/int8' -> [("int8", "gguf"), ("f16", "int8")] (main/draft weight formats)."""
    if text is None:
        return None
    from ..models.formats import FORMATS

    out = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        main, _, draft = item.partition("/")
        if main not in FORMATS or (draft and draft not in FORMATS):
            raise DemoError(f"Formats are MAIN/DRAFT pairs of {', '.join(FORMATS)}, e.g. int8/gguf (got {item!r}).")
        out.append((main, draft or None))
    if not out:
        raise DemoError("Give at least one MAIN/DRAFT format pair, e.g. f16/int8.")
    return out


def _weights_label(formats: tuple) -> str:
    main, draft = formats
    return "preset" if main is None and draft is None else f"{main or 'preset'}/{draft or 'preset'}"


class _Stopped(Exception):
    """The caller's stop event was set."""


# -- the measurement -------------------------------------------------------------------------

def run_bench(
    preset: Optional[str] = None,
    *,
    modes: Sequence[str] = MODES,
    assistant_tokens: Optional[Sequence[int]] = None,
    prompt_lookup: bool = False,
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
) -> dict:
    """Measure and return the result dict (what --json writes).

    `assistant_tokens` defaults to the preset's K; `prompts` overrides the built-in set
    (then `prompt_classes` and `limit_prompts` are ignored); `arena` reuses an engine
    (and its loaded pipelines), else one is made from `models` and `cache_dir` that keeps
    only one pipeline pair loaded at a time. Setting `stop`, or Ctrl-C, ends the
    measurement early: the result then holds what was measured and "interrupted": True.
    """
    from ..engine.arena import how_it_ran, threads_for

    started = time.time()
    modes = _normalize_modes(modes)
    if repeat < 1:
        raise DemoError("Repeat each prompt at least once (--repeat 1 or more).")
    chosen = list(prompts) if prompts is not None else select(prompt_classes, limit_prompts)
    if not chosen:
        raise DemoError("No prompts to run; choose at least one prompt class.")
    if arena is None:
        arena = _make_arena(models, cache_dir)
    preset_obj = arena.presets.get(preset)
    ks = list(dict.fromkeys(assistant_tokens or [arena.default_assistant_tokens(preset_obj.name)]))
    for k in ks:
        GenerationSettings(max_new_tokens=max_new_tokens, assistant_tokens=k).validated()
    methods = (["draft"] if preset_obj.draft is not None else []) + (["prompt_lookup"] if prompt_lookup else [])
    if not methods:
        raise DemoError(f"Preset {preset_obj.name!r} has no draft model; add --prompt-lookup to measure prompt lookup.")
    format_pairs = list(dict.fromkeys(formats or [(None, None)]))
    configs = [Config(m, meth, k, _weights_label(f)) for f in format_pairs for m in modes for meth in methods
               for k in ks]
    per_config = 1 + len(chosen) * repeat  # one warm-up, then every prompt × repeat
    total = len(configs) * per_config
    stop = stop or threading.Event()

    result: dict = {
        "bench_version": 1,
        "started_at": _iso(started),
        "machine": machine_info(),
        "versions": versions(),
        "preset": {
            "name": preset_obj.name,
            "description": preset_obj.description,
            "main": _without_paths(preset_obj.main.model_dump()),
            "draft": _without_paths(preset_obj.draft.model_dump()) if preset_obj.draft is not None else None,
            "assistant_tokens": preset_obj.assistant_tokens,
        },
        "settings": {
            "modes": list(modes),
            "methods": methods,
            "assistant_tokens": ks,
            "weights": [_weights_label(f) for f in format_pairs],
            "repeat": repeat,
            "max_new_tokens": max_new_tokens,
            "prompt_classes": list(dict.fromkeys(p.cls for p in chosen)),
            "limit_prompts": limit_prompts,
            "exact": exact,
            "greedy": True,
            "max_ngram_size": GenerationSettings().max_ngram_size,
            "race_threads_per_pipeline": race_thread_count if race_thread_count is not None else race_threads(),
            "cores": cpu_cores(),
            "warmup_runs_per_config": 1,
            "std": "sample standard deviation (n-1); 0 for a single sample",
        },
        "prompts": [{"id": p.id, "class": p.cls, "text": p.text} for p in chosen],
        "configs": [],
        "samples": [],
        "errors": [],
        "aggregates": [],
        "interrupted": False,
    }
    done = 0

    def report(message: str) -> None:
        progress(done, total, message)
    from ..core.memory import rss_bytes

    result["weights"] = {}
    try:
        for fmt in format_pairs:
            weights = _weights_label(fmt)
            report(f"preparing models ({weights})")
            pair = arena.prepare(preset_obj.name, lambda m: report(f"preparing: {m}"), stop,
                                 main_format=fmt[0], draft_format=fmt[1])
            # The prepared folders by name only: the JSON is handed to visitors (the Benchmark tab).
            folders = {"main_folder": pair.main.name, "draft_folder": pair.draft.name if pair.draft is not None else None}
            result["preset"].update(folders)
            result["weights"][weights] = {"main_format": pair.main_format, "draft_format": pair.draft_format, **folders}
            for mode in modes:
                for method in methods:
                    runners = None  # let the cache drop the previous pair before loading the next
                    options = PipelineOptions(exact=exact)
                    request = _request(preset_obj.name, mode, method, ks[0], max_new_tokens, options, race_thread_count,
                                       fmt)
                    try:
                        runners = arena.runners(request, lambda m: report(f"{weights} {mode} {METHOD_LABELS[method]}: {m}"))
                    except DemoError as e:
                        # Keep what other configurations measured; fail only if nothing ran (below).
                        for k in ks:
                            result["errors"].append({**Config(mode, method, k, weights).as_dict(), "stage": "load",
                                                     "errors": {"pipelines": str(e)}})
                        done += per_config * len(ks)
                        report(f"{mode} {METHOD_LABELS[method]}: failed to load")
                        continue
                    threads = threads_for(request)
                    loaded_rss = rss_bytes()  # the process with this pair loaded (and nothing else)
                    for k in ks:
                        config = Config(mode, method, k, weights)
                        settings = GenerationSettings(max_new_tokens=max_new_tokens, method=method,
                                                      assistant_tokens=k).validated()
                        result["configs"].append({
                            **config.as_dict(),
                            "rss_loaded_bytes": loaded_rss,
                            "threads_per_pipeline": threads,
                            "how": how_it_ran("race" if mode == "race" else "fair", options, method, threads,
                                              arena.loads_in_turn(request)),
                        })
                        report(f"{config.label()}: warm-up")
                        warm = _measure(runners, mode, chosen[0].text, settings, stop)
                        done += 1
                        failed = {s: r.error for s, r in warm.items() if r.error}
                        if failed:
                            result["errors"].append({**config.as_dict(), "stage": "warm-up", "errors": failed})
                            done += per_config - 1  # skip this configuration, keep the others
                            report(f"{config.label()}: failed")
                            continue
                        for prompt in chosen:
                            for r in range(repeat):
                                report(f"{config.label()}: {prompt.id} #{r + 1}")
                                runs = _measure(runners, mode, prompt.text, settings, stop)
                                result["samples"].append(_sample(config, prompt, r, runs))
                                done += 1
                        report(f"{config.label()}: done")
    except (KeyboardInterrupt, _Stopped):
        result["interrupted"] = True
    if result["errors"] and not result["samples"] and not result["interrupted"]:
        first = result["errors"][0]
        side, message = next(iter(first["errors"].items()))
        if first["stage"] == "load":
            raise DemoError(message)
        raise DemoError(f"The {side} pipeline failed during the warm-up run: {message.rstrip('.')}.")
    finished = time.time()
    result["finished_at"] = _iso(finished)
    result["duration_s"] = round(finished - started, 3)
    result["aggregates"] = add_curves(aggregate(result["samples"]), result["samples"])
    return result


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


# -- aggregates ------------------------------------------------------------------------------

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


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(t))


# -- output ----------------------------------------------------------------------------------

def _pm(d: Optional[dict], fmt: str, scale: float = 1.0) -> str:
    if not d:
        return "-"
    return f"{d['mean'] * scale:{fmt}} ± {d['std'] * scale:{fmt}}"


def _one(d: Optional[dict], fmt: str, key: str = "mean") -> str:
    return f"{d[key]:{fmt}}" if d else "-"


def format_table(result: dict) -> str:
    """A short aligned plain-text table: one row per configuration and prompt class, plus 'all'."""
    header = ["mode", "method", "K", "class", "n", "baseline tok/s", "spec tok/s",
              "TTFT base ms", "TTFT spec ms", "accept", "tok/step", "speedup", "median", "weights"]
    rows = []
    for agg in result["aggregates"]:
        groups = list(agg["classes"].items())
        if len(groups) > 1 or not groups:
            groups.append(("all", agg["overall"]))
        for name, st in groups:
            rows.append([
                agg["mode"], METHOD_LABELS.get(agg["method"], agg["method"]), str(agg["assistant_tokens"]),
                name, str(st["samples"] - st["failed"]),
                _pm(st["baseline_tokens_per_s"], ".1f"), _pm(st["speculative_tokens_per_s"], ".1f"),
                _pm(st["baseline_ttft_s"], ".0f", 1000), _pm(st["speculative_ttft_s"], ".0f", 1000),
                _one(st["acceptance_rate"], ".2f"), _one(st["tokens_per_step"], ".2f"),
                _pm(st["speedup"], ".2f"), _one(st["speedup"], ".2f", "median"), agg.get("weights", "preset"),
            ])
    right = {2, 4, 5, 6, 7, 8, 9, 10, 11, 12}
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    m, v = result["machine"], result["versions"]
    out = [
        f"preset {result['preset']['name']}; {result['settings']['max_new_tokens']} new tokens, "
        f"{result['settings']['repeat']} repeat(s), greedy{', exact (f32)' if result['settings']['exact'] else ''}",
        f"{m['cpu_model']}, {m['cores']} cores ({' '.join(m['isa_flags']) or 'no ISA flags found'}); "
        f"openvino {v.get('openvino')}, openvino_genai {v.get('openvino_genai')}",
        line(header),
        line(["-" * w for w in widths]),
    ] + [line(r) for r in rows]
    if not rows:
        out.append("(no samples)")
    for e in result["errors"]:
        out.append(f"failed: {e.get('weights', 'preset')} {e['mode']} {e['method']} K={e['assistant_tokens']} ({e['stage']}): "
                   + "; ".join(f"{side}: {msg}" for side, msg in e["errors"].items()))
    if result["interrupted"]:
        out.append(f"interrupted: {len(result['samples'])} sample(s) measured before the stop")
    return "\n".join(out)


def _without_paths(model: dict) -> dict:
    """A preset's model as models.yaml says it, with a file or folder on this machine by name only."""
    out = dict(model)
    for key in ("path", "repo"):
        value = out.get(key)
        if isinstance(value, str) and (key == "path" or Path(value).is_absolute()):
            out[key] = Path(value).name
    return out


def write_json(result: dict, path: Path) -> None:
    write_atomic(path, json.dumps(result, indent=1) + "\n")


def _plot_classes(left, aggs, modes, methods) -> None:
    """Median speedup vs K, one line per prompt class (and method, and mode)."""
    colors = {c: f"C{i}" for i, c in enumerate(list(CLASSES) + ["all"])}
    styles = {"draft": "-", "prompt_lookup": "--"}
    markers = {"fair": "o", "race": "s"}
    for mode in modes:
        for method in methods:
            series = sorted((a for a in aggs if a["mode"] == mode and a["method"] == method),
                            key=lambda a: a["assistant_tokens"])
            classes = list(dict.fromkeys(c for a in series for c in a["classes"]))
            for cls in classes:
                xs, ys = [], []
                for a in series:
                    st = a["classes"].get(cls)
                    if st and st["speedup"]:
                        xs.append(a["assistant_tokens"])
                        ys.append(st["speedup"]["median"])
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
            series = sorted((a for a in aggs if a.get("weights") == w and a["mode"] == mode and a["method"] == "draft"),
                            key=lambda a: a["assistant_tokens"])
            if not series:
                continue
            ax.plot([a["assistant_tokens"] for a in series],
                    [a["overall"]["speculative_tokens_per_s"]["mean"] for a in series],
                    "-" if mode != "race" else "--", marker="o", color=f"C{i}",
                    label=w + (f" ({mode})" if len(modes) > 1 else ""))
            main = w.split("/")[0]
            alone.setdefault((main, mode), []).extend(a["overall"]["baseline_tokens_per_s"]["mean"] for a in series)
    for j, ((main, mode), values) in enumerate(sorted(alone.items())):
        level = sum(values) / len(values)
        ax.axhline(level, color="grey", linestyle=":", linewidth=0.9)
        ax.annotate(f"{main} alone{f' ({mode})' if len(modes) > 1 else ''}", (ax.get_xlim()[0], level),
                    fontsize="x-small", color="grey", va="bottom")
    ax.set_ylabel("speculative tokens/s (mean over prompts)")
    ax.set_title("formats × K (dotted: the main model alone)")


def write_plot(result: dict, path: Path) -> None:
    """Median speedup vs K per prompt class; mean tok/s per mode; acceptance by position (curves.py)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    aggs = result["aggregates"]
    modes = list(dict.fromkeys(a["mode"] for a in aggs))
    methods = list(dict.fromkeys(a["method"] for a in aggs))
    fig, (left, right, by_position) = plt.subplots(1, 3, figsize=(17, 4.8))
    fig.suptitle(f"Speculative decoding on {result['preset']['name']} "
                 f"({result['settings']['max_new_tokens']} new tokens"
                 f"{', interrupted' if result['interrupted'] else ''})")

    weights = list(dict.fromkeys(a.get("weights") for a in aggs if a.get("weights")))
    if len(weights) > 1:
        _plot_formats(left, aggs, weights, modes)
    else:
        _plot_classes(left, aggs, modes, methods)
    left.set_xlabel("assistant tokens (K)")
    ks = sorted({a["assistant_tokens"] for a in aggs})
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
                (s[BASELINE] if field.startswith("baseline") else s[SPECULATIVE])["tokens_per_s"]
                for s in result["samples"]
                if s["mode"] == mode and s["speedup"] is not None and (method is None or s["method"] == method)
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


# -- command line ----------------------------------------------------------------------------

def _normalize_modes(modes: Sequence[str]) -> list[str]:
    out = []
    for m in modes:
        if m not in MODE_ALIASES:
            raise DemoError(f"Unknown mode {m!r}; choose fair (or its old name, sequential) or race.")
        out.append(MODE_ALIASES[m])
    return list(dict.fromkeys(out)) or list(MODES)


def parse_ints(text: Optional[str]) -> Optional[list[int]]:
    if text is None:
        return None
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise DemoError(f"Assistant tokens are whole numbers separated by commas, e.g. 1,3,5,8 (got {text!r}).") from None
    if not values:
        raise DemoError("Give at least one number of assistant tokens, e.g. 1,3,5,8.")
    return values


def _check_output(path: Optional[Path], flag: str) -> None:
    """Fail before measuring, not after, when an output cannot be written."""
    if path is None:
        return
    parent = Path(path).expanduser().resolve().parent
    if not parent.is_dir():
        raise DemoError(f"The folder for {flag} ({parent}) does not exist; create it or choose another path.")
    if not os.access(parent, os.W_OK):
        raise DemoError(f"The folder for {flag} ({parent}) is not writable; choose another path.")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m demo.bench", description=__doc__.split("\n")[0])
    ap.add_argument("--preset", help="a preset from models.yaml (default: the file's default)")
    ap.add_argument("--json", type=Path, help="write every raw sample and the aggregates here")
    ap.add_argument("--plot", type=Path, help="write a PNG plot here")
    ap.add_argument("--mode", choices=["sequential", "fair", "race"],
                    help="fair (each pipeline alone, all cores; `sequential` is an alias) or race (both at once); default both")
    ap.add_argument("--assistant-tokens", metavar="K[,K…]",
                    help="assistant tokens to sweep, e.g. 1,3,5,8 (default: the preset's)")
    ap.add_argument("--prompt-lookup", action="store_true",
                    help="also measure prompt lookup (no draft) with the same assistant tokens")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per prompt and configuration (default 3)")
    ap.add_argument("--prompts", metavar="CLASS[,CLASS…]",
                    help=f"prompt classes: {','.join(CLASSES)} (default all)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--limit-prompts", type=int, metavar="N", help="only the first N prompts of each class")
    ap.add_argument("--exact", action="store_true", help="f32 everywhere: greedy outputs must match exactly (slower)")
    ap.add_argument("--formats", metavar="MAIN/DRAFT[,…]",
                    help="weight-format pairs to sweep, e.g. gguf/gguf,int8/gguf,f16/int8 "
                         "(default: what models.yaml says)")
    ap.add_argument("--race-threads", type=int, metavar="N",
                    help="threads per pipeline in race mode (default: split the cores evenly; "
                         "0: OpenVINO's default, every pipeline on every core)")
    ap.add_argument("--cache-dir", type=Path, help="prepared-model cache")
    ap.add_argument("--models", type=Path, help="path to models.yaml")
    return ap


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(lambda: _run(args))


def _run(args) -> int:
    _check_output(args.json, "--json")
    _check_output(args.plot, "--plot")
    classes = [c.strip() for c in args.prompts.split(",") if c.strip()] if args.prompts else None
    ks = parse_ints(args.assistant_tokens)
    formats = parse_formats(args.formats)
    bar = None  # made at the first progress report, so that early errors print alone

    def progress(done: int, total: int, message: str) -> None:
        nonlocal bar
        if bar is None:
            from tqdm import tqdm

            bar = tqdm(total=total, unit="run", desc="bench", file=sys.stderr, dynamic_ncols=True)
        bar.total = total
        bar.n = done
        bar.set_postfix_str(message, refresh=False)
        bar.refresh()

    try:
        result = run_bench(
            args.preset,
            modes=[args.mode] if args.mode else MODES,
            assistant_tokens=ks,
            prompt_lookup=args.prompt_lookup,
            repeat=args.repeat,
            prompt_classes=classes,
            max_new_tokens=args.max_new_tokens,
            limit_prompts=args.limit_prompts,
            exact=args.exact,
            cache_dir=args.cache_dir,
            models=args.models,
            progress=progress,
            race_thread_count=args.race_threads,
            formats=formats,
        )
    finally:
        if bar is not None:
            bar.close()
    print(format_table(result))
    if args.json:
        write_json(result, args.json)
    if args.plot:
        write_plot(result, args.plot)
    return 130 if result["interrupted"] else 0



if __name__ == "__main__":
    sys.exit(main())
