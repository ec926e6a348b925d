"""Experiment (issue 30): what transparent huge pages buy the pipelines, in one process.

OpenVINO's CPU plugin copies a model's weights into memory of its own; under the kernel's THP
"madvise" mode that memory stays in 4 KiB pages unless asked (glibc asks for every allocation of
a process started with GLIBC_TUNABLES=glibc.malloc.hugetlb=1). Separate processes drift apart
on a shared host, so this loads the
main alone and the speculative pair twice in one process, collapses the second copy's new
anonymous memory into huge pages (madvise MADV_HUGEPAGE, then MADV_COLLAPSE, Linux 6.1+), and
answers the benchmark's code prompts with the four pipelines interleaved prompt by prompt, the
order rotating. A region the kernel merged with the first copy's is collapsed too, so the
difference can only read smaller than it is. With --warm-up-pairs N it instead times what huge
pages cost a pipeline's load: N pairs of fresh processes, glibc asking and not asking in turn,
each building the speculative pipeline and running its first generate (16 tokens).

    python scripts/experiments/huge_pages.py MAIN_IR DRAFT_IR [--k 4] [--prompts 3] [--rounds 3] \
        [--warm-up-pairs N] [--json bench-results/huge-pages.json]
"""

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from spec_knobs import build, run_once  # noqa: E402

from demo.core.bench_prompts import select  # noqa: E402
from demo.core.machine import machine_info  # noqa: E402

MADV_HUGEPAGE, MADV_COLLAPSE, HUGE = 14, 25, 2 << 20
PROPS = {"INFERENCE_PRECISION_HINT": "f32", "sampler_num_threads": 1}


def anonymous_regions() -> set:
    regions = set()
    for line in Path("/proc/self/maps").read_text().splitlines():
        parts = line.split()
        if len(parts) == 5 or (len(parts) > 5 and parts[5] == "[heap]"):  # no file behind it
            start, end = (int(x, 16) for x in parts[0].split("-"))
            if end - start >= 2 * HUGE:
                regions.add((start, end))
    return regions


def collapse(regions) -> int:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    done = 0
    for start, end in regions:
        start, end = (start + HUGE - 1) // HUGE * HUGE, end // HUGE * HUGE
        if end > start and libc.madvise(start, end - start, MADV_HUGEPAGE) == 0:
            done += libc.madvise(start, end - start, MADV_COLLAPSE) == 0
    return done


def anon_huge_mb() -> float:
    rollup = Path("/proc/self/smaps_rollup").read_text().splitlines()
    return next(int(l.split()[1]) for l in rollup if l.startswith("AnonHugePages:")) / 1024


def warm_up_child(main: Path, draft: Path, k: int) -> None:
    """In a fresh process: the speculative pipeline's construction and first generate, as JSON."""
    prompt = select(["code"], 1)[0].text
    t0 = time.perf_counter()
    pipe = build(main, draft, PROPS, True)
    t1 = time.perf_counter()
    run_once(pipe, prompt, k, 16, True)
    print(json.dumps({"load_s": t1 - t0, "first_generate_s": time.perf_counter() - t1, "anon_huge_mb": anon_huge_mb()}))


def warm_up_pairs(args) -> dict:
    runs = {"4k": [], "huge": []}
    for i in range(args.warm_up_pairs):
        for name in (("4k", "huge") if i % 2 == 0 else ("huge", "4k")):
            env = {**os.environ, "GLIBC_TUNABLES": f"glibc.malloc.hugetlb={int(name == 'huge')}"}
            out = subprocess.run([sys.executable, __file__, str(args.main), str(args.draft), "--k", str(args.k),
                                  "--warm-up-child"], env=env, capture_output=True, text=True, check=True)
            runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"pair {i + 1} {name}: {runs[name][-1]}", flush=True)
    summary = {}
    for key in ("load_s", "first_generate_s"):
        diffs = [h[key] - f[key] for h, f in zip(runs["huge"], runs["4k"])]
        summary[key] = {"huge_minus_4k_s": statistics.median(diffs), "min": min(diffs), "max": max(diffs), "n": len(diffs)}
        print(f"{key}: huge pages add {statistics.median(diffs):+.2f} s (median; {min(diffs):+.2f} to {max(diffs):+.2f}, "
              f"{len(diffs)} pairs)")
    return {"warm_up": summary, "warm_up_runs": runs}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("main", type=Path)
    ap.add_argument("draft", type=Path)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warm-up-pairs", type=int, default=0, help="time loads in fresh processes instead")
    ap.add_argument("--warm-up-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.warm_up_child:
        warm_up_child(args.main, args.draft, args.k)
        return 0
    if args.warm_up_pairs:
        result = warm_up_pairs(args)
        if args.json:
            args.json.write_text(json.dumps({"machine": machine_info(), "k": args.k, **result}, indent=1))
        return 0
    prompts = [p.text for p in select(["code"], args.prompts)]
    pipes = {}

    def load(suffix: str) -> None:
        for name, speculative in (("base", False), ("spec", True)):
            pipes[f"{name}-{suffix}"] = build(args.main, args.draft, PROPS, speculative)
            run_once(pipes[f"{name}-{suffix}"], prompts[0], args.k, 16, speculative)  # untimed: kernels

    load("4k")
    before = anonymous_regions()
    load("huge")
    collapsed = collapse(anonymous_regions() - before)
    print(f"{collapsed} regions collapsed; {anon_huge_mb():.0f} MB of anonymous memory in huge pages", flush=True)
    runs = {name: [] for name in pipes}
    names = list(pipes)
    for r in range(args.rounds):
        for i, prompt in enumerate(prompts):
            shift = (r + i) % len(names)
            for name in names[shift:] + names[:shift]:
                runs[name].append(run_once(pipes[name], prompt, args.k, 128, name.startswith("spec"))["decode_tok_s"])
            print(f"round {r + 1} prompt {i + 1}: " + ", ".join(f"{n} {v[-1]:.1f}" for n, v in runs.items()), flush=True)
    summary = {}
    for a, b in (("base-huge", "base-4k"), ("spec-huge", "spec-4k"), ("spec-4k", "base-4k"), ("spec-huge", "base-huge")):
        ratios = [x / y for x, y in zip(runs[a], runs[b])]
        summary[f"{a} / {b}"] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios), "n": len(ratios)}
        print(f"{a} ÷ {b}: paired median {statistics.median(ratios):.3f} ({min(ratios):.2f}-{max(ratios):.2f}, {len(ratios)} pairs)")
    if args.json:
        args.json.write_text(json.dumps({"machine": machine_info(), "k": args.k, "collapsed_regions": collapsed,
                                         "anon_huge_mb": anon_huge_mb(), "summary": summary, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
