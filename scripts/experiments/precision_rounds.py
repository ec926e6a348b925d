"""Experiment (issue 30): calibration's activation-precision comparison on one main IR, with as
many rounds as asked: the same code the calibration stage runs (demo.calibrate.precision:
the model compiled at f32 and at the CPU plugin's default, stepped in turn, one token and a
5-token verify), then its verdict with the fastest draft's f32 guess taken from --draft-ms.

    python scripts/experiments/precision_rounds.py MAIN_IR [--rounds 12] [--draft-ms 17] [--json OUT.json]
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from demo.calibrate import precision  # noqa: E402
from demo.core.machine import machine_info  # noqa: E402
from demo.engine.stateful import StatefulModel  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--draft-ms", type=float, default=17.0, help="the fastest draft's f32 guess, for the verdict")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    info = machine_info()
    print(f"CPU: {info.get('cpu_model')}; flags {' '.join(info.get('isa_flags', []))}", flush=True)
    default = precision.plugin_default()
    if default == precision.PRIOR:
        print("the CPU plugin's default is f32 here: nothing to compare")
        return 0
    f32 = StatefulModel(args.folder, None)
    try:
        measured = precision.measure(f32, args.folder, None, default, rounds=args.rounds)
    finally:
        f32.close()
    verdict = precision.choose(measured, args.draft_ms / 1000, args.folder.name)
    print(f"{default} ÷ f32 per round, a token: {verdict['baseline_ratios']}")
    print(f"{default} ÷ f32 per round, a speculative step at K={precision.K_TYPICAL}: {verdict['speculative_ratios']}")
    print(f"choice: {verdict['choice']} ({verdict['reason']})")
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "measured": measured, "verdict": verdict}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
