"""Experiment (issue 31, RELIABILITY.md): does running each side in a child process
(demo/engine/child_side.py, the arena's default) change what a race measures? The same
default pair (calibrated formats and K, race threads) is loaded twice, in this process and in
children, and raced on the benchmark's code prompts, the two interleaved prompt by prompt
(the order alternating), greedy, 128 new tokens. Prints each race and the paired ratios
(children ÷ in process) of each side's decode rate after its first token and of the speedup,
and writes them to a JSON file. With --alone SIDE, that side runs alone instead of a race
(the same threads), which tells the pipe's cost from the two processes' competing.

    python scripts/experiments/child_vs_inprocess.py CACHE_DIR [--rounds 3] [--alone baseline] [--out FILE]
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from demo.core import bench_prompts  # noqa: E402
from demo.core.machine import machine_info  # noqa: E402
from demo.core.settings import GenerationSettings  # noqa: E402
from demo.core.streaming import BASELINE, SPECULATIVE, DoneEvent  # noqa: E402
from demo.engine.arena import Arena, RaceRequest  # noqa: E402
from demo.engine.pipelines import PipelineCache  # noqa: E402
from demo.engine.race import race  # noqa: E402
from demo.models.presets import load_presets  # noqa: E402
from demo.models.sources import ModelStore  # noqa: E402


def decode_rate(result) -> float:
    chunks = result.chunks
    after_first = sum(len(c.token_ids) for c in chunks[1:])
    return after_first / (chunks[-1].t - chunks[0].t)


def one_race(runners: dict, prompt: str, settings: GenerationSettings) -> dict:
    results = {e.side: e.result for e in race(runners, prompt, settings) if isinstance(e, DoneEvent)}
    assert not any(r.error for r in results.values()), {s: r.error for s, r in results.items()}
    rates = {side: decode_rate(results[side]) for side in (BASELINE, SPECULATIVE)}
    return {**rates, "speedup": rates[SPECULATIVE] / rates[BASELINE]}


def alone(runner, prompt: str, settings: GenerationSettings) -> dict:
    result = runner.run(prompt, settings, lambda chunk: True)
    assert not result.error, result.error
    return {runner.side: decode_rate(result)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cache_dir", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--alone", choices=(BASELINE, SPECULATIVE), help="run this side alone, not a race")
    ap.add_argument("--out", type=Path, default=Path("bench-results/child-vs-inprocess.json"))
    args = ap.parse_args()

    children = Arena.create(cache_dir=args.cache_dir)
    here = Arena(load_presets(None), ModelStore(args.cache_dir), PipelineCache())
    k = children.default_assistant_tokens(None, "race")
    settings = GenerationSettings(max_new_tokens=128, assistant_tokens=k)
    request = RaceRequest(prompt="x", settings=settings)
    runners = {"children": children.runners(request), "in process": here.runners(request)}
    metrics = (args.alone,) if args.alone else (BASELINE, SPECULATIVE, "speedup")

    def measure(where: str, text: str, s: GenerationSettings) -> dict:
        return alone(runners[where][args.alone], text, s) if args.alone else one_race(runners[where], text, s)

    for where in runners:  # one untimed run each: first-run costs out of the way
        measure(where, "Hi", GenerationSettings(max_new_tokens=8, assistant_tokens=k))
    prompts = bench_prompts.select(["code"])
    rows = []
    for round_ in range(args.rounds):
        for i, p in enumerate(prompts):
            order = ["children", "in process"] if (round_ + i) % 2 == 0 else ["in process", "children"]
            row = {"prompt": p.id, "round": round_}
            for where in order:
                row[where] = measure(where, p.text, settings)
            rows.append(row)
            print(p.id, round_, {w: {m: round(v, 2) for m, v in row[w].items()} for w in runners}, flush=True)
    ratios = {m: [r["children"][m] / r["in process"][m] for r in rows] for m in metrics}
    summary = {m: {"median": statistics.median(v), "min": min(v), "max": max(v)} for m, v in ratios.items()}
    for m, s in summary.items():
        print(f"children ÷ in process, {m}: median {s['median']:.3f} (range {s['min']:.3f}–{s['max']:.3f}, "
              f"{len(rows)} pairs)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": machine_info(), "assistant_tokens": k, "alone": args.alone, "rows": rows,
                                    "ratios": summary}, indent=1))
    print("written to", args.out)


if __name__ == "__main__":
    main()
