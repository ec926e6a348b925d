"""The deciding measurement for the own verify loop (issue 56): on the main model's stateful
IR, driven as the loop drives it, the cost of one infer over m = 1 … 8 new tokens after a
realistic prefix, steady (m after m) and after a change of m, per weight format, interleaved
(round by round, format by format, the widths in alternating order, so a drifting machine
shifts all alike); and the loop's own cost a step (the proposers, the gate, accepting, masking),
from real generations with the drafters on.

    python scripts/verify_cost.py [--formats int4_channel,int4_sym] [--prefix 300] [--rounds 5]
                                  [--json bench-results/verify-cost-<cpu>-<date>.json]

A free guess pays when  (tokens a drafting step keeps) / cost(m) > 1 / cost(1):  with the
ratios printed here and the replay's tokens per step (scripts/replay_drafters.py) the
prediction follows.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from demo.bench.free_draft_replay import loop_seconds_per_step  # noqa: E402
from demo.calibrate.calibration import prepare_candidates  # noqa: E402
from demo.core.bench_prompts import select  # noqa: E402
from demo.core.errors import run_command  # noqa: E402
from demo.core.machine import machine_info  # noqa: E402
from demo.engine.stateful import cpu_config  # noqa: E402
from demo.engine.verify_loop.gate import Gate  # noqa: E402
from demo.engine.verify_loop.runner import MAX_WIDTH, OwnLoopRunner, time_widths  # noqa: E402
from demo.core.settings import GenerationSettings  # noqa: E402
from demo.models.presets import load_presets  # noqa: E402
from demo.models.sources import ModelStore  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="qwen2.5-coder-embedded")
    ap.add_argument("--formats", default="int4_channel,int4_sym")
    ap.add_argument("--prefix", type=int, default=300, help="tokens already in the KV cache")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--precision", default="f32", help="activation precision (calibration's choice; f32 by default)")
    ap.add_argument("--cache-dir", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    def body() -> int:
        preset = load_presets(None).get(args.preset)
        store = ModelStore(args.cache_dir)
        formats = [f for f in args.formats.split(",") if f]
        folders = prepare_candidates(preset, store, formats, [])
        info = machine_info()
        print(f"CPU: {info.get('cpu_model')}; flags {' '.join(info.get('isa_flags', []))}", flush=True)
        runners = {f: OwnLoopRunner(folders[("main", f)], cpu_config(None, args.precision), costs=[1.0] * MAX_WIDTH,
                                    warmup=False) for f in formats}
        # Each round times every format in turn (the order rotating): a steady infer of m tokens
        # after m (the median of 4), and the first after a change of m (the switch), m = 1 … 8.
        rounds = {f: [] for f in formats}
        for rnd in range(args.rounds):
            for f in formats[rnd % len(formats):] + formats[:rnd % len(formats)]:
                rounds[f].append(time_widths(runners[f].main, prefix=args.prefix))
        curves, switches = {}, {}
        for f in formats:
            med = [float(np.median([g.costs[m] for g in rounds[f]])) for m in range(MAX_WIDTH)]
            switches[f] = float(np.median([g.switch_s for g in rounds[f]]))
            curves[f] = {"cost_ms": [1000 * c for c in med], "ratio": [c / med[0] for c in med],
                         "switch_ms": 1000 * switches[f], "rounds_ms": [[1000 * c for c in g.costs] for g in rounds[f]]}
            print(f"{f:>13}: one token {med[0] * 1000:.1f} ms; m tokens ÷ one token (steady): "
                  + " ".join(f"{m}:{c / med[0]:.2f}" for m, c in enumerate(med, 1))
                  + f"; a change of m adds {switches[f] * 1000:.1f} ms", flush=True)
        overhead = {}
        for f, r in runners.items():
            r.gate = Gate([c / 1000 for c in curves[f]["cost_ms"]], switches[f])
            rows = []
            for p in select(["code", "summarize"]):
                result = r.run(p.text, GenerationSettings(max_new_tokens=128), lambda c: True)
                steps = r.last_steps[1:]
                rows.append({"prompt": p.id, "steps": len(steps), "tokens": sum(len(s.tokens) for s in steps),
                             "overhead_ms_per_step": 1000 * loop_seconds_per_step(result, steps)})
            overhead[f] = rows
            per = [x["overhead_ms_per_step"] for x in rows]
            print(f"{f:>13}: the loop's own work {np.median(per):.2f} ms a step (median over {len(per)} answers; "
                  f"{min(per):.2f}–{max(per):.2f})", flush=True)
        if args.json:
            args.json.write_text(json.dumps({"machine": info, "preset": preset.name, "prefix": args.prefix,
                                             "rounds": args.rounds, "precision": args.precision, "curves": curves,
                                             "loop_overhead": overhead}, indent=1))
            print(f"wrote {args.json}")
        return 0

    return run_command(body)


if __name__ == "__main__":
    sys.exit(main())
