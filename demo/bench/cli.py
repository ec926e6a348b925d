"""Benchmark speculative decoding against the baseline over a built-in prompt set.

    python -m demo.bench --preset smollm2-self-draft --json bench.json --plot bench.png
    python -m demo.bench --preset NAME --mode fair --assistant-tokens 1,3,5,8 --prompt-lookup
    python -m demo.bench --preset NAME --prompts summarize --limit-prompts 2 --repeat 1
    python -m demo.bench --method free-draft --mode fair   # the own verify loop's free drafting

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
import os
import sys
from pathlib import Path
from typing import Optional

from ..core.bench_prompts import CLASSES
from ..core.errors import DemoError, run_command
from .measure import run_bench
from .plan import MODES, parse_formats, parse_ints, parse_methods, parse_tree
from .plot import write_plot
from .report import format_table, write_json


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
    ap.add_argument("--tree", metavar="B,D", help="EAGLE-3 tree drafting: branching factor and depth, e.g. 2,3 "
                    "(K at least the depth); a chain of K guesses without it")
    ap.add_argument("--prompt-lookup", action="store_true",
                    help="also measure prompt lookup (no draft) with the same assistant tokens")
    ap.add_argument("--method", metavar="METHOD[,…]",
                    help="speculative methods to measure: draft, eagle3, prompt-lookup, free-draft (the arena's own "
                         "verify loop with near-free guesses); default: the preset's draft, plus --prompt-lookup")
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
    ap.add_argument("--concurrency", metavar="N[,N…]",
                    help="throughput under load instead (demo.bench.load): N requests at once in one "
                         "continuous-batching pipeline per side, e.g. 1,2,4,8; saves where speculation stops paying")
    ap.add_argument("--rounds", type=int, default=2,
                    help="with --concurrency: rounds per N, baseline and speculative in turn (default 2)")
    ap.add_argument("--time-limit", type=float, metavar="S",
                    help="with --concurrency: start no new round after S seconds (the first round always runs)")
    ap.add_argument("--cache-dir", type=Path, help="prepared-model cache")
    ap.add_argument("--models", type=Path, help="path to models.yaml")
    return ap


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(lambda: _run(args))


def _run(args) -> int:
    _check_output(args.json, "--json")
    _check_output(args.plot, "--plot")
    if args.concurrency is not None:
        return _run_load(args)
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
            methods=parse_methods(args.method),
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
            tree=parse_tree(args.tree),
        )
    finally:
        if bar is not None:
            bar.close()
    print(format_table(result))
    if args.json:
        write_json(result, args.json)
    if args.plot:
        write_plot(result, args.plot)
    return 130 if result.interrupted else 0


def _run_load(args) -> int:
    """`--concurrency`: the load benchmark (demo.bench.load); --prompts/--limit-prompts default to 2 code prompts."""
    from .load import parse_concurrency, run_load
    from .load_report import format_load_table, write_load_json, write_load_plot

    ks = parse_ints(args.assistant_tokens)
    if ks and len(ks) > 1:
        raise DemoError("The load benchmark takes one number of assistant tokens (--assistant-tokens K).")
    classes = [c.strip() for c in args.prompts.split(",") if c.strip()] if args.prompts else ["code"]
    result = run_load(args.preset, concurrency=parse_concurrency(args.concurrency), rounds=args.rounds,
                      prompt_classes=classes, limit_prompts=args.limit_prompts or 2,
                      max_new_tokens=args.max_new_tokens, assistant_tokens=ks[0] if ks else None,
                      cache_dir=args.cache_dir, models=args.models, time_limit_s=args.time_limit,
                      checkpoint=lambda partial: args.json and write_load_json(partial, args.json),
                      progress=lambda done, total, msg: print(f"[{done}/{total}] {msg}", file=sys.stderr, flush=True))
    print(format_load_table(result))
    if args.json:
        write_load_json(result, args.json)
    if args.plot:
        write_load_plot(result, args.plot)
    return 130 if result["interrupted"] else 0
