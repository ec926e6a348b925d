"""Experiment (BENCHMARKS.md): how long one step of a real speculative pipeline takes at each
K, against the straight line calibration fits through two K (demo.calibrate.cost_model.fit_overhead).

The arena's own speculative pipeline (demo.engine.pipelines.build_side, greedy) answers one
prompt at every K, the K interleaved round by round after an untimed run, and each step is
timed from the streamed chunks after the first token. It prints the median step per K, the
line through the two `--fit` K, and each K's distance from it; `--json` writes it all.

    python scripts/experiments/step_by_k.py --main MAIN_IR --draft DRAFT_IR --ks 1,2,3,4,5,6,7,8 --fit 2,6 \
        --rounds 3 --json bench-results/step-by-k.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from demo.core.machine import machine_info  # noqa: E402
from demo.core.settings import GenerationSettings, PipelineOptions  # noqa: E402
from demo.core.streaming import SPECULATIVE  # noqa: E402
from demo.engine.pipelines import PairKey, build_side  # noqa: E402

PROMPT = "Write a Python function that checks whether a string is a palindrome."


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--main", required=True, type=Path, help="the main model's IR folder")
    parser.add_argument("--draft", required=True, type=Path, help="the draft model's IR folder")
    parser.add_argument("--ks", default="1,2,3,4,5,6,7,8", help="assistant tokens to time, comma-separated")
    parser.add_argument("--fit", default="2,6", help="the two K the line goes through (calibration: 2,6)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    k0, k1 = (int(k) for k in args.fit.split(","))
    if not {k0, k1} <= set(ks):
        parser.error("--fit must name two of the K in --ks")

    runner = build_side(PairKey(str(args.main), str(args.draft), "draft", PipelineOptions()), SPECULATIVE,
                        lambda message: None)
    steps: dict[int, list[float]] = {k: [] for k in ks}
    for round_ in range(args.rounds + 1):
        for k in ks:
            run = runner.run(PROMPT, GenerationSettings(max_new_tokens=args.max_new_tokens, assistant_tokens=k),
                             lambda chunk: True)
            if run.error or len(run.chunks) < 3:
                print(f"K={k}: the pipeline failed ({run.error or 'too few steps'})", file=sys.stderr)
                return 1
            if round_:  # round 0 compiles kernels for the new shapes
                steps[k].append((run.chunks[-1].t - run.chunks[0].t) / (len(run.chunks) - 1))
    median = {k: statistics.median(v) for k, v in steps.items()}
    slope = (median[k1] - median[k0]) / (k1 - k0)
    line = {k: median[k0] + slope * (k - k0) for k in ks}
    print("  K   step ms   line ms   step/line")
    for k in ks:
        print(f"{k:3d}   {1000 * median[k]:7.1f}   {1000 * line[k]:7.1f}   {median[k] / line[k]:9.2f}")
    if args.json:
        args.json.write_text(json.dumps({
            "machine": machine_info(), "main": str(args.main), "draft": str(args.draft), "prompt": PROMPT,
            "max_new_tokens": args.max_new_tokens, "rounds": args.rounds, "fit": [k0, k1],
            "step_s": {str(k): v for k, v in steps.items()}, "median_step_s": {str(k): v for k, v in median.items()},
            "line_s": {str(k): v for k, v in line.items()}}, indent=2))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
