"""Throughput under load: N requests at once in ONE continuous-batching pipeline, baseline vs
speculative, and the N from which speculation stops paying (python -m demo.bench --concurrency 1,2,4,8).

A speculative step spends compute on guesses. With one request the cores mostly wait on
memory, so guesses are nearly free; with many requests batched, the main model's step is
already busy, and the guesses cost real work. For every N both pipelines (loaded once, the
same SchedulerConfig, each alone with all cores) get the same N requests, submitted at once
(demo.engine.batching), greedy, round after round in turn: baseline, speculative, baseline,
speculative. The ratio of aggregate tokens per second is paired within a round.

Per N and side: aggregate tok/s (all tokens ÷ the time until the last request finished),
each request's decode rate (tokens after its first ÷ the time after it), time to first
token and completion latency (from submission; p50/p95), tokens per step (per request: its
tokens ÷ the steps it got tokens in; per batch: all tokens ÷ pipeline steps). The crossover
(the smallest N whose median paired ratio is at most 1) is saved for this machine
(demo.models.load_store), where the page and the Serve replicas read it.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional, Sequence

from ..core.bench_prompts import select
from ..core.errors import DemoError
from ..core.machine import machine_info, versions
from ..core.settings import GenerationSettings, PipelineOptions, cpu_cores
from ..core.streaming import BASELINE, SIDES, SPECULATIVE

LOAD_VERSION = 1
MAX_CONCURRENCY = 32

Progress = Callable[[int, int, str], None]


class _Stopped(Exception):
    pass


def percentile(values: Sequence[float], q: float) -> Optional[float]:
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    xs = sorted(values)
    if not xs:
        return None
    pos = (len(xs) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def parse_concurrency(text: Optional[str]) -> Optional[list[int]]:
    if text is None:
        return None
    try:
        values = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise DemoError(f"Concurrency is whole numbers separated by commas, e.g. 1,2,4,8 (got {text!r}).") from None
    if not values or any(not 1 <= n <= MAX_CONCURRENCY for n in values):
        raise DemoError(f"Give request counts from 1 to {MAX_CONCURRENCY}, e.g. 1,2,4,8.")
    return values


def batch_sample(requests, steps: int, t0: float) -> dict:
    """One side's batch of requests (batching.BatchedRequest, all submitted at t0) as raw numbers."""
    rows = []
    for r in requests:
        times = [t for t, _ in r.steps]
        first = times[0] if times else None
        tokens = r.tokens
        after_first = tokens - (r.steps[0][1] if r.steps else 0)
        rows.append({
            "prompt_id": r.tag, "tokens": tokens, "steps": len(times), "status": r.status,
            "ttft_s": first - t0 if first is not None else None,
            "latency_s": times[-1] - t0 if times else None,
            "decode_tok_s": after_first / (times[-1] - first) if len(times) > 1 and times[-1] > first else None,
            "tokens_per_step": tokens / len(times) if times else None,
            "drafting": r.drafting, "error": r.error,
        })
    end = max((row["latency_s"] for row in rows if row["latency_s"] is not None), default=None)
    total = sum(row["tokens"] for row in rows)
    return {"requests": rows, "tokens": total, "wall_s": end, "pipeline_steps": steps,
            "aggregate_tok_s": total / end if end else None,
            "batch_tokens_per_step": total / steps if steps else None}


def summarize(samples: list) -> list:
    """Per N and side: medians and percentiles over rounds and requests; per N: paired ratios."""
    rows = []
    for n in sorted({s["n"] for s in samples}):
        row: dict = {"n": n}
        for side in SIDES:
            runs = [s[side] for s in samples if s["n"] == n and s.get(side)]
            reqs = [r for run in runs for r in run["requests"]]

            def vals(key, src=reqs):
                return [x[key] for x in src if x.get(key) is not None]

            row[side] = {
                "aggregate_tok_s": (statistics.median(vals("aggregate_tok_s", runs))
                                    if vals("aggregate_tok_s", runs) else None),
                "decode_tok_s_p50": percentile(vals("decode_tok_s"), 50),
                "ttft_s_p50": percentile(vals("ttft_s"), 50), "ttft_s_p95": percentile(vals("ttft_s"), 95),
                "latency_s_p50": percentile(vals("latency_s"), 50), "latency_s_p95": percentile(vals("latency_s"), 95),
                "tokens_per_step": statistics.mean(vals("tokens_per_step")) if vals("tokens_per_step") else None,
                "batch_tokens_per_step": (statistics.mean(vals("batch_tokens_per_step", runs))
                                          if vals("batch_tokens_per_step", runs) else None),
                "rounds": len(runs),
            }
        ratios = [s["ratio"] for s in samples if s["n"] == n and s.get("ratio") is not None]
        row["ratios"] = ratios
        row["ratio_median"] = statistics.median(ratios) if ratios else None
        rows.append(row)
    return rows


def run_load(preset: Optional[str] = None, *, concurrency: Sequence[int] = (1, 2, 4, 8), rounds: int = 2,
             prompt_classes: Optional[Sequence[str]] = ("code",), limit_prompts: Optional[int] = 2,
             max_new_tokens: int = 64, assistant_tokens: Optional[int] = None, cache_dir: Optional[Path] = None,
             models: Optional[Path] = None, arena=None, progress: Progress = lambda d, t, m: None,
             stop: Optional[threading.Event] = None, save_record: bool = True,
             time_limit_s: Optional[float] = None, checkpoint: Callable[[dict], None] = lambda r: None) -> dict:
    """Measure and return the JSON form (raw samples, per-N summary, crossover); with
    `save_record`, a run that measured every N is saved as this machine's load record.
    `time_limit_s`: no new round starts after that many seconds (the first always runs);
    `checkpoint(result)` after every sample (the CLI writes the JSON so far)."""
    from ..engine.batched_runner import load_batched
    from ..engine.batching import BatchedPipeline
    from ..engine.openvino_runner import generation_config, template
    from ..engine.pipelines import PipelineCache
    from ..models import load_store

    started = time.time()
    stop = stop or threading.Event()
    ns = sorted(set(concurrency))
    if not ns or any(not 1 <= n <= MAX_CONCURRENCY for n in ns):
        raise DemoError(f"Give request counts from 1 to {MAX_CONCURRENCY}, e.g. 1,2,4,8.")
    if rounds < 1:
        raise DemoError("Run every request count at least once (--rounds 1 or more).")
    prompts = select(prompt_classes, limit_prompts)
    if arena is None:
        from .measure import _make_arena

        arena = _make_arena(models, cache_dir)
    preset_obj = arena.presets.get(preset)
    if preset_obj.draft is None:
        raise DemoError(f"Preset {preset_obj.name!r} has no draft model; the load benchmark compares a draft pair.")
    k = assistant_tokens or arena.default_assistant_tokens(preset_obj.name, "fair")
    settings = GenerationSettings(max_new_tokens=max_new_tokens, assistant_tokens=k).validated()
    total = 2 + 2 * rounds * len(ns)
    done = 0

    def report(message: str) -> None:
        progress(done, total, message)

    report("preparing models")
    pair = arena.prepare(preset_obj.name, lambda m: report(f"preparing: {m}"), stop)
    options = PipelineOptions()
    key = PipelineCache.key(pair.main, pair.draft, "draft", options)
    result: dict = {
        "load_version": LOAD_VERSION, "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "machine": machine_info(), "versions": versions(),
        "preset": {"name": preset_obj.name, "main_format": pair.main_format, "draft_format": pair.draft_format,
                   "main_folder": pair.main.name, "draft_folder": pair.draft.name},
        "settings": {"concurrency": ns, "rounds": rounds, "time_limit_s": time_limit_s,
                     "order": "round after round over every N; baseline then speculative for each N",
                     "max_new_tokens": max_new_tokens, "assistant_tokens": k, "greedy": True,
                     "prompts": [p.id for p in prompts], "cores": cpu_cores(),
                     "threads": "OpenVINO's default (each pipeline alone, all cores)",
                     "scheduler": "one SchedulerConfig for both (demo.core.placement.SchedulerSettings)",
                     "api": "openvino_genai.ContinuousBatchingPipeline.add_request + step, one handle per request"},
        "prompts": [{"id": p.id, "class": p.cls, "text": p.text} for p in prompts],
        "samples": [], "summary": [], "crossover": None, "interrupted": False,
    }
    import openvino_genai as ov

    batches = {}
    try:
        for side in SIDES:
            if stop.is_set():
                raise _Stopped
            batches[side] = BatchedPipeline(load_batched(key, side, report), name=f"load-{side}")
            done += 1
        tokenizer = batches[BASELINE].pipe.get_tokenizer()
        texts = [(p.id, template(tokenizer, p.text)) for p in prompts]
        configs = {side: generation_config(ov, side, settings) for side in SIDES}
        warm = {side: generation_config(ov, side, replace(settings, max_new_tokens=8)) for side in SIDES}
        for side in SIDES:  # kernels compile on the first batched steps: not in a timed batch
            report(f"warming up the {side} pipeline")
            _batch(batches[side], texts, 2, warm[side], stop)
        for r in range(rounds):  # round after round over every N: a cut-short run still has every N once
            if r and time_limit_s is not None and time.time() - started > time_limit_s:
                result["cut_at_round"] = r  # the time limit: no new round starts
                break
            for n in ns:
                sample: dict = {"n": n, "round": r}
                for side in SIDES:
                    report(f"N={n} round {r + 1}: {side}")
                    sample[side] = _batch(batches[side], texts, n, configs[side], stop)
                    done += 1
                b, s = sample[BASELINE]["aggregate_tok_s"], sample[SPECULATIVE]["aggregate_tok_s"]
                sample["ratio"] = s / b if b and s else None
                result["samples"].append(sample)
                checkpoint(result)
    except (_Stopped, KeyboardInterrupt):
        result["interrupted"] = True
    finally:
        batches.clear()  # free both pipelines before returning
    result["summary"] = summarize(result["samples"])
    ratios = {row["n"]: row["ratio_median"] for row in result["summary"] if row["ratio_median"] is not None}
    result["crossover"] = load_store.crossover_of(ratios)
    finished = time.time()
    result["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(finished))
    result["duration_s"] = round(finished - started, 3)
    if save_record and not result["interrupted"] and set(ratios) == set(ns):
        record = load_store.save(arena.store, preset_obj, k, max_new_tokens, ratios)
        result["record"] = {"file": load_store.path_for(arena.store, preset_obj.name, record.fingerprint).name,
                            "sentence": record.sentence()}
    return result


def _batch(batch, texts: list, n: int, config, stop: threading.Event) -> dict:
    """Submit n requests at once (prompts in turn) and wait for all; return batch_sample()."""
    if stop.is_set():
        raise _Stopped
    keep_going = lambda ids, t: not stop.is_set()  # noqa: E731
    steps_before = batch.steps
    t0 = time.perf_counter()
    requests = batch.submit_many([(texts[i % len(texts)][1], config, keep_going) for i in range(n)])
    for i, r in enumerate(requests):
        r.tag = texts[i % len(texts)][0]
    for r in requests:
        r.done.wait()
    if stop.is_set():
        raise _Stopped  # a batch cut short is not a sample
    failed = [r for r in requests if r.status == "failed"]
    if failed:
        raise DemoError(f"OpenVINO failed a request of a batch of {n} ({failed[0].error}); try fewer requests or "
                        "fewer new tokens.")
    return batch_sample(requests, batch.steps - steps_before, t0)
