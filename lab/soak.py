"""Soak: many races in a row on one engine, some stopped early, watching for leaks.

    python -m lab.soak --runs 200                       # the default preset
    python -m lab.soak --runs 200 --preset smollm2-self-draft --max-new-tokens 32 --json soak.json

A booth kiosk or a Space serves strangers for days in one process, so what one race
leaves behind adds up. This drives the engine's front door (demo.engine.arena) exactly as the
page does, with no page, and measures:

* resident memory (the app's process and its children, where each side's pipeline runs)
  after a warm-up and at the end (growth %), and its trend over the
  second half of the runs (bytes per run). The speculative pipeline's KV-cache pools
  (cache_size_gb for the main model, as much again for the draft) are reserved at load but
  become resident block by block, a few MB per short race, for hundreds of races; so the
  warm-up first fills them with long prompts until one adds under 2 MB (--no-fill-kv
  skips that, and then the growth includes the pools filling);
* threads: every race worker is a daemon thread that nobody joins (a Stop must never wait
  on the web server's loop), so each must end by itself; Python's thread count, the
  process's native threads (OpenVINO's pools) and any worker still alive, by name;
* scratch folders under the cache's tmp/, where preparing works (they must not pile up);
  the soak works in a cache folder of its own that shares the real cache's models, so
  that only its own scratch folders are counted;
* tok/s per side, median over the runs that were not stopped.

Every `--stop-every`-th run is stopped after a few chunks, the way the page's Stop does it
(close the event stream; the workers see the flag and return). Exit status 1 when a check
fails: a worker thread or a scratch folder left, a run that failed, or RSS growth after
warm-up above --max-rss-growth percent.
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional

from demo.core import memory
from demo.core.errors import DemoError, run_command
from demo.core.metrics import side_stats
from demo.core.settings import GenerationSettings
from demo.core.streaming import BASELINE, SPECULATIVE, ChunkEvent, DoneEvent
from demo.engine.arena import Arena, RaceRequest
from demo.models.sources import default_cache_dir

MB = 1 << 20
# Threads the engine starts per run (demo.engine.race, demo.engine.arena); none may outlive its run.
WORKER_PREFIXES = ("race-", "fair", "arena-load")


def native_threads() -> Optional[int]:
    """Threads of this process as the kernel counts them (Python's and OpenVINO's)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def workers_alive() -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t.name.startswith(WORKER_PREFIXES))


def scratch_entries(cache_dir: Path) -> list[str]:
    root = cache_dir / "tmp"
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def snapshot(arena: Arena) -> dict:
    return {"rss_bytes": memory.tree_rss_bytes(), "python_threads": threading.active_count(),
            "native_threads": native_threads(), "workers_alive": workers_alive(),
            "scratch": scratch_entries(arena.store.cache_dir)}


def settle(arena: Arena, timeout_s: float = 60.0) -> None:
    """Wait until the last run's workers have returned and given the slot back, then collect."""
    deadline = time.monotonic() + timeout_s
    while (workers_alive() or arena.admission.state()["running"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    gc.collect()
    time.sleep(0.2)


def one_run(arena: Arena, request: RaceRequest, stop_after_chunks: Optional[int]) -> dict:
    """One race as the page runs it; with `stop_after_chunks`, Stop is pressed after that many chunks."""
    stop = threading.Event()
    results: dict = {}
    chunks = 0
    t0 = time.perf_counter()
    events = arena.run(request, stop)
    try:
        for event in events:
            if isinstance(event, ChunkEvent):
                chunks += 1
                if stop_after_chunks is not None and chunks >= stop_after_chunks:
                    break
            elif isinstance(event, DoneEvent):
                results[event.side] = event.result
    finally:
        events.close()  # what the page does on Stop or a closed tab: never waits for the workers
        stop.set()
    sample = {"stopped": stop_after_chunks is not None, "seconds": round(time.perf_counter() - t0, 4),
              "chunks": chunks, "tokens": {}, "tok_s": {}, "errors": {}}
    for side, r in results.items():
        sample["tokens"][side] = len(r.token_ids)
        if r.error:
            sample["errors"][side] = r.error
        elif not r.cancelled:
            sample["tok_s"][side] = round(side_stats(r.chunks, r.start, r.end).tokens_per_s, 3)
    return sample


def fill_kv_pools(arena: Arena, like: RaceRequest, progress: Callable[[str], None], target_tokens: int = 3800,
                  still_mb: float = 2.0, max_runs: int = 60) -> dict:
    """Long prompts (~`target_tokens` tokens, each writing that many fresh KV blocks) through
    each side's pipeline, in the admission slot, until two in a row add less than `still_mb`
    of resident memory: its pools are then resident. Both sides: since the fairness fix the
    baseline runs under the same scheduler config, so it has its own fixed pool too."""
    from dataclasses import replace

    runners = arena.runners(like)

    def text(run: int, words: int) -> str:  # fixed-width labels: the same length every run
        return "Repeat the last word of this list: " + " ".join(f"w{run:03d}x{i:04d}" for i in range(words))

    first = runners[SPECULATIVE]
    words = 200
    words = int(words * target_tokens / first.count_tokens(first.template(text(0, words))))
    settings = replace(like.settings, max_new_tokens=4)
    t0, start, runs, settled = time.perf_counter(), memory.tree_rss_bytes(), 0, True
    ticket = arena.admission.enter("filling the KV-cache pools")
    try:
        for side in (SPECULATIVE, BASELINE):
            rss, still, side_runs = memory.tree_rss_bytes(), 0, 0
            while still < 2 and side_runs < max_runs:
                result = runners[side].run(text(runs + 1, words), settings, lambda chunk: True)
                if result.error:
                    raise DemoError(f"A long warm-up prompt failed ({result.error}); try --no-fill-kv.")
                runs, side_runs = runs + 1, side_runs + 1
                gc.collect()
                now = memory.tree_rss_bytes()
                still = still + 1 if now - rss < still_mb * MB else 0
                progress(f"filling the KV-cache pools ({side}): run {side_runs}, RSS {now / MB:.0f} MB "
                         f"({(now - rss) / MB:+.1f} MB)")
                rss = now
            settled = settled and still >= 2
    finally:
        ticket.release()
    return {"runs": runs, "prompt_tokens": first.count_tokens(first.template(text(1, words))),
            "seconds": round(time.perf_counter() - t0, 1), "added_bytes": memory.tree_rss_bytes() - start, "settled": settled}


def _slope(ys: list[float]) -> Optional[float]:
    """Least-squares slope of ys against their index (per run)."""
    n = len(ys)
    if n < 2:
        return None
    mx, my = (n - 1) / 2, statistics.fmean(ys)
    return sum((i - mx) * (y - my) for i, y in enumerate(ys)) / sum((i - mx) ** 2 for i in range(n))


@contextmanager
def private_cache_view(cache_dir: Optional[Path]) -> Iterator[Path]:
    """A cache folder of this soak's own whose models/ is the real cache's (a symlink): models
    are shared, but its tmp/ is watched by nobody else, so another process preparing into a
    shared cache (a test run, a second app) is not counted as a scratch folder this soak left."""
    real = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    (real / "models").mkdir(parents=True, exist_ok=True)
    view = Path(tempfile.mkdtemp(prefix="soak-cache-"))
    try:
        (view / "models").symlink_to((real / "models").resolve(), target_is_directory=True)
        yield view
    finally:
        shutil.rmtree(view, ignore_errors=True)  # removes the link, never the models behind it


def run_soak(runs: int, preset: Optional[str] = None, max_new_tokens: int = 32, stop_every: int = 5,
             stop_after_chunks: int = 3, warmup_runs: int = 5, max_rss_growth_pct: float = 5.0, fill_kv: bool = True,
             models: Optional[Path] = None, cache_dir: Optional[Path] = None,
             progress: Callable[[str], None] = lambda m: None) -> dict:
    """Run the soak (see the module's docstring) and return its result."""
    with private_cache_view(cache_dir) as view:
        return _soak(runs, preset, max_new_tokens, stop_every, stop_after_chunks, warmup_runs, max_rss_growth_pct,
                     fill_kv, models, view, progress)


def _soak(runs: int, preset: Optional[str], max_new_tokens: int, stop_every: int, stop_after_chunks: int,
          warmup_runs: int, max_rss_growth_pct: float, fill_kv: bool, models: Optional[Path], cache_dir: Path,
          progress: Callable[[str], None]) -> dict:
    if runs < 1 or warmup_runs < 1:
        raise DemoError("Run at least one race and one warm-up race (--runs 1 --warmup 1 or more).")
    if stop_every < 0 or stop_after_chunks < 1:
        raise DemoError("--stop-every must be 0 (never) or more, and --stop-after-chunks 1 or more.")
    started = time.time()
    arena = Arena.create(models, cache_dir)
    preset_obj = arena.presets.get(preset)
    settings = GenerationSettings(max_new_tokens=max_new_tokens, assistant_tokens=preset_obj.assistant_tokens).validated()
    from demo.core.bench_prompts import select

    prompts = list(preset_obj.examples) + [p.text for p in select()]
    at_start = snapshot(arena)

    def request(i: int) -> RaceRequest:
        return RaceRequest(prompt=prompts[i % len(prompts)], preset=preset_obj.name, settings=settings)

    progress(f"warming up: preparing and loading {preset_obj.name}, then {warmup_runs} races")
    for i in range(warmup_runs):  # the last one stopped early, so that path is warm too
        one_run(arena, request(i), stop_after_chunks if i == warmup_runs - 1 else None)
    settle(arena)
    before_fill = snapshot(arena)
    fill = fill_kv_pools(arena, request(0), progress) if fill_kv else None
    after_warmup = snapshot(arena)

    samples = []
    t_loop = time.perf_counter()
    for i in range(runs):
        stopped = stop_every > 0 and (i + 1) % stop_every == 0
        sample = one_run(arena, request(warmup_runs + i), stop_after_chunks if stopped else None)
        sample["run"] = i + 1
        sample["rss_bytes"] = memory.tree_rss_bytes()
        samples.append(sample)
        if (i + 1) % max(1, runs // 10) == 0 or i + 1 == runs:
            progress(f"{i + 1}/{runs} runs, RSS {sample['rss_bytes'] / MB:.1f} MB")
    loop_s = time.perf_counter() - t_loop
    settle(arena)
    at_end = snapshot(arena)

    warm_rss, end_rss = after_warmup["rss_bytes"], at_end["rss_bytes"]
    growth = 100.0 * (end_rss - warm_rss) / warm_rss
    half = [s["rss_bytes"] for s in samples[len(samples) // 2:]]
    complete = [s for s in samples if not s["stopped"] and len(s["tok_s"]) == 2]

    def median(side: str) -> Optional[float]:
        values = [s["tok_s"][side] for s in complete]
        return round(statistics.median(values), 2) if values else None

    new_scratch = sorted(set(at_end["scratch"]) - set(at_start["scratch"]))
    failed = [s["run"] for s in samples if s["errors"]]
    checks = {
        "rss_growth_ok": growth <= max_rss_growth_pct,
        "no_worker_threads_left": at_end["workers_alive"] == [],
        "python_threads_stable": at_end["python_threads"] == after_warmup["python_threads"],
        "no_scratch_left": new_scratch == [],
        "no_failed_runs": failed == [],
    }
    from demo.core.machine import machine_info, versions

    return {
        "soak_version": 1,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "machine": machine_info(),
        "versions": versions(),
        "preset": preset_obj.name,
        "runs": runs,
        "warmup_runs": warmup_runs,
        "stopped_runs": sum(s["stopped"] for s in samples),
        "max_new_tokens": max_new_tokens,
        "seconds": round(loop_s, 2),
        "rss": {
            "at_start_bytes": at_start["rss_bytes"],
            "before_kv_fill_bytes": before_fill["rss_bytes"],
            "kv_fill": fill,
            "after_warmup_bytes": warm_rss,
            "at_end_bytes": end_rss,
            "peak_bytes": memory.peak_rss_bytes(),
            "growth_pct": round(growth, 3),
            "max_growth_pct": max_rss_growth_pct,
            "second_half_slope_bytes_per_run": None if _slope(half) is None else round(_slope(half), 1),
        },
        "threads": {
            "python": {"at_start": at_start["python_threads"], "after_warmup": after_warmup["python_threads"],
                       "at_end": at_end["python_threads"]},
            "native": {"at_start": at_start["native_threads"], "after_warmup": after_warmup["native_threads"],
                       "at_end": at_end["native_threads"]},
            "workers_alive_at_end": at_end["workers_alive"],
        },
        "scratch": {"folder": str(arena.store.cache_dir / "tmp"), "at_start": at_start["scratch"],
                    "at_end": at_end["scratch"], "left_by_this_run": new_scratch},
        "tok_s_median": {BASELINE: median(BASELINE), SPECULATIVE: median(SPECULATIVE),
                         "complete_runs": len(complete)},
        "failed_runs": failed,
        "checks": checks,
        "ok": all(checks.values()),
        "samples": samples,
    }


def format_report(r: dict) -> str:
    rss, th, sc, tok = r["rss"], r["threads"], r["scratch"], r["tok_s_median"]
    slope = rss["second_half_slope_bytes_per_run"]
    lines = [
        f"soak: {r['runs']} races of {r['preset']} ({r['stopped_runs']} stopped early), "
        f"{r['max_new_tokens']} new tokens, {r['seconds']:.0f} s after {r['warmup_runs']} warm-up races",
        ("KV-cache pools: not filled first (--no-fill-kv)" if rss["kv_fill"] is None else
         f"KV-cache pools: {rss['kv_fill']['runs']} runs (both sides) of {rss['kv_fill']['prompt_tokens']} prompt tokens "
         f"({rss['kv_fill']['seconds']:.0f} s) made {rss['kv_fill']['added_bytes'] / MB:.0f} MB resident"
         + ("" if rss["kv_fill"]["settled"] else " and had not settled")),
        f"RSS: {rss['after_warmup_bytes'] / MB:.1f} MB after warm-up, {rss['at_end_bytes'] / MB:.1f} MB at the end: "
        f"{rss['growth_pct']:+.2f} % (limit {rss['max_growth_pct']:g} %); peak {rss['peak_bytes'] / MB:.1f} MB"
        + ("" if slope is None else f"; trend over the second half {slope / 1024:+.1f} KB per run"),
        f"threads: Python {th['python']['after_warmup']} after warm-up -> {th['python']['at_end']} at the end; "
        f"native {th['native']['after_warmup']} -> {th['native']['at_end']}; "
        f"race workers still alive: {', '.join(th['workers_alive_at_end']) or 'none'}",
        f"scratch folders in this soak's own tmp/ ({sc['folder']}, removed afterwards): "
        f"{len(sc['at_start'])} before, {len(sc['at_end'])} after"
        + (f" (left by this soak: {', '.join(sc['left_by_this_run'])})" if sc["left_by_this_run"] else ""),
        f"tok/s median over {tok['complete_runs']} complete runs: baseline {tok[BASELINE]}, "
        f"speculative {tok[SPECULATIVE]}",
    ]
    if r["failed_runs"]:
        lines.append(f"failed runs: {r['failed_runs']}")
    failed = [name for name, ok in r["checks"].items() if not ok]
    lines.append("result: ok" if not failed else f"result: FAILED ({', '.join(failed)})")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lab.soak", description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=200, help="races to run after the warm-up (default 200)")
    ap.add_argument("--preset", help="preset name from models.yaml (default: the file's default)")
    ap.add_argument("--max-new-tokens", type=int, default=32, help="per side and race (default 32)")
    ap.add_argument("--stop-every", type=int, default=5, help="stop every Nth race early (default 5; 0 = never)")
    ap.add_argument("--stop-after-chunks", type=int, default=3, help="a stopped race is stopped after this many chunks")
    ap.add_argument("--warmup", type=int, default=5, help="races before the memory baseline is taken (default 5)")
    ap.add_argument("--max-rss-growth", type=float, default=5.0,
                    help="fail when RSS grows more than this many percent after warm-up (default 5)")
    ap.add_argument("--no-fill-kv", dest="fill_kv", action="store_false",
                    help="skip filling the KV-cache pools during the warm-up (then RSS grows while they fill)")
    ap.add_argument("--json", type=Path, help="write the result, with every run's sample, to this file")
    ap.add_argument("--models", type=Path, help="path to models.yaml (default: the repo's)")
    ap.add_argument("--cache-dir", type=Path, help="prepared-model cache (default $SPECDEC_CACHE_DIR or ~/.cache/speculative-arena)")
    args = ap.parse_args(argv)

    def body() -> int:
        result = run_soak(args.runs, args.preset, args.max_new_tokens, args.stop_every, args.stop_after_chunks,
                          args.warmup, args.max_rss_growth, args.fill_kv, args.models, args.cache_dir,
                          progress=lambda m: print(f"[soak] {m}", file=sys.stderr, flush=True))
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(result, indent=1))
        print(format_report(result))
        return 0 if result["ok"] else 1

    return run_command(body, interrupted="soak interrupted; nothing was written")


if __name__ == "__main__":
    sys.exit(main())
