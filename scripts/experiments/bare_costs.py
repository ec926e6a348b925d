"""Experiment (issue 30): one step of M tokens of several IR folders or CPU property sets,
driven directly (no pipeline), in turn round by round (demo.calibrate.measure.interleaved_costs,
calibration's own measurement), with each variant's paired ratio to the first.

    python scripts/experiments/bare_costs.py base=DRAFT_IR \
        'dq64=DRAFT_IR@{"DYNAMIC_QUANTIZATION_GROUP_SIZE": "64"}' [--ms 1,5] [--rounds 10] [--json OUT]

A variant is NAME=FOLDER, optionally @ and a JSON object of CPU properties added to the ones a
pipeline gets (f32 activations, OpenVINO's default threads).
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from demo.calibrate.measure import interleaved_costs  # noqa: E402
from demo.core.machine import machine_info  # noqa: E402
from demo.engine import stateful  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("variants", nargs="+", metavar="NAME=FOLDER[@JSON]")
    ap.add_argument("--ms", default="1,5", help="tokens a step, a list")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    ms = [int(m) for m in args.ms.split(",")]
    pipeline_config, models, props = stateful.cpu_config, {}, {}
    for v in args.variants:
        name, _, rest = v.partition("=")
        folder, _, extra = rest.partition("@")
        props[name] = json.loads(extra) if extra else {}
        stateful.cpu_config = lambda threads, precision="f32", extra=props[name]: {
            **pipeline_config(threads, precision), **extra}
        models[name] = stateful.StatefulModel(Path(folder), None)
    stateful.cpu_config = pipeline_config
    costs = interleaved_costs(models, ms, rounds=args.rounds)
    first, summary = next(iter(models)), {}
    for name in models:
        for m in ms:
            ratios = [a / b for a, b in zip(costs[name][m], costs[first][m])]
            summary[f"{name} M={m}"] = {"median_ms": statistics.median(costs[name][m]) * 1e3,
                                        "vs_first": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
            print(f"{name:>12} M={m}: {statistics.median(costs[name][m]) * 1e3:6.2f} ms; ÷ {first} paired median "
                  f"{statistics.median(ratios):.3f} ({min(ratios):.2f}-{max(ratios):.2f}, {len(ratios)} rounds)")
    if args.json:
        args.json.write_text(json.dumps({"machine": machine_info(), "variants": args.variants, "summary": summary,
                                         "seconds": {n: {str(m): v for m, v in c.items()} for n, c in costs.items()}},
                                        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
