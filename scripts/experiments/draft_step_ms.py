"""Experiment (issue 20): one decode step of each draft IR, driven directly (StatefulModel, the
kernels an LLMPipeline runs, nothing else on the clock), interleaved model by model so drift
hits all alike. Prints and saves the median ms per token after a 64-token prefill.

    python scripts/experiments/draft_step_ms.py DRAFT_IR TRIMMED_IR ... --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from demo.engine.stateful import StatefulModel  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    models = {str(f): StatefulModel(f, None) for f in args.folders}
    prompt = [[(i * 7919) % 30000 + 100 for i in range(64)]]
    times = {k: [] for k in models}
    for _ in range(args.rounds):
        for name, m in models.items():
            m.request.reset_state()
            m.feed(prompt, 0)
            for s in range(args.steps):
                t = time.perf_counter()
                m.feed([[1000 + s]], 64 + s)
                times[name].append((time.perf_counter() - t) * 1000)
    summary = {k: statistics.median(v) for k, v in times.items()}
    for k, v in summary.items():
        print(f"{v:7.2f} ms/token  {k}")
    if args.json:
        args.json.write_text(json.dumps({"median_ms_per_token": summary, "runs_ms": times}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
