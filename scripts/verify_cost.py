"""The deciding measurement for the own verify loop (issue 56): on the main model's stateful
IR, driven as the loop drives it, the cost of one infer over m = 1 … 8 new tokens after a
realistic prefix, per weight format, interleaved (round by round, format by format, every
width in turn, so a drifting machine shifts all alike); and the loop's own cost a step (the
proposers, the gate, accepting, masking), from real generations with the drafters on.

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
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from demo.calibrate.calibration import prepare_candidates  # noqa: E402
from demo.core.bench_prompts import select  # noqa: E402
from demo.core.errors import run_command  # noqa: E402
from demo.core.machine import machine_info  # noqa: E402
from demo.engine.stateful import cpu_config  # noqa: E402
from demo.engine.verify_loop.gate import Gate  # noqa: E402
from demo.engine.verify_loop.runner import MAX_WIDTH, OwnLoopRunner  # noqa: E402
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
        ids = [int(t) for t in np.random.default_rng(0).integers(100, 20000, args.prefix)]
        samples = {f: [[] for _ in range(MAX_WIDTH)] for f in formats}
        for f, r in runners.items():  # untimed: the first infer of each width compiles its kernels
            r.main.prefill(ids)
            for m in range(1, MAX_WIDTH + 1):
                r.main.verify(ids[:m])
                r.main.keep(0)
        for rnd in range(args.rounds):
            order = formats[rnd % len(formats):] + formats[:rnd % len(formats)]
            for f in order:
                main = runners[f].main
                main.prefill(ids)
                widths = list(range(1, MAX_WIDTH + 1))
                for m in widths if rnd % 2 == 0 else widths[::-1]:
                    t0 = time.perf_counter()
                    main.verify(ids[:m])
                    samples[f][m - 1].append(time.perf_counter() - t0)
                    main.keep(0)
        curves = {}
        for f in formats:
            med = [float(np.median(s)) for s in samples[f]]
            curves[f] = {"cost_ms": [1000 * c for c in med], "ratio": [c / med[0] for c in med]}
            print(f"{f:>13}: one token {med[0] * 1000:.1f} ms; m tokens ÷ one token: "
                  + " ".join(f"{m}:{c / med[0]:.2f}" for m, c in enumerate(med, 1)), flush=True)
        overhead = {}
        for f, r in runners.items():
            r.gate = Gate([c / 1000 for c in curves[f]["cost_ms"]])
            rows = []
            for p in select(["code", "summarize"]):
                result = r.run(p.text, GenerationSettings(max_new_tokens=128), lambda c: True)
                steps = r.last_steps[1:]
                wall = result.end - steps[0].t + steps[0].infer_s if steps else 0
                infer = sum(s.infer_s for s in steps)
                rows.append({"prompt": p.id, "steps": len(steps), "tokens": sum(len(s.tokens) for s in steps),
                             "overhead_ms_per_step": 1000 * (wall - infer) / max(1, len(steps))})
            overhead[f] = rows
            per = [x["overhead_ms_per_step"] for x in rows]
            print(f"{f:>13}: the loop's own work {np.median(per):.2f} ms a step (median over {len(per)} answers; "
                  f"{min(per):.2f}–{max(per):.2f})", flush=True)
        if args.json:
            args.json.write_text(json.dumps({"machine": info, "preset": preset.name, "prefix": args.prefix,
                                             "rounds": args.rounds, "precision": args.precision, "curves": curves,
                                             "samples_s": samples, "loop_overhead": overhead}, indent=1))
            print(f"wrote {args.json}")
        return 0

    return run_command(body)


if __name__ == "__main__":
    sys.exit(main())
