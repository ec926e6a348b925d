"""Two costs the own verify loop's design rests on (docs/free-drafting.md), on the main model's
stateful IR, interleaved round by round so drift hits every variant alike:

* dropping a rejected guess's KV rows by cutting every state (read, slice, write back, as
  OpenVINO GenAI's trim_kv_cache) against masking them (the loop's way): a 3-token verify that
  keeps 1, then a 1-token step, per variant;
* changing the verify width from one infer to the next: 1 token a step, 2 a step, and 1 and 2
  alternating, per infer.

    python scripts/experiments/kv_trim_and_width.py [--format int4_channel] [--rounds 5] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

import numpy as np  # noqa: E402

from demo.calibrate.calibration import prepare_candidates  # noqa: E402
from demo.core.machine import machine_info  # noqa: E402
from demo.engine.stateful import cpu_config  # noqa: E402
from demo.engine.verify_loop.main_model import StatefulMain  # noqa: E402
from demo.models.presets import load_presets  # noqa: E402
from demo.models.sources import ModelStore  # noqa: E402

STEPS = 24


def cut(main: StatefulMain, keep: int) -> None:
    """GenAI's way: every state read, sliced along the sequence and written back."""
    drop = main.fed - keep
    main.past -= drop
    main.mask = main.mask[:len(main.mask) - drop]
    main.fed = keep
    for state in main.request.query_state():
        data = state.state.data
        index = [slice(None)] * data.ndim
        index[main.seq_axis] = slice(0, len(main.mask))
        from openvino import Tensor
        state.state = Tensor(np.ascontiguousarray(data[tuple(index)]))


def trim_round(main: StatefulMain, ids, how: str) -> float:
    """Median ms of (a 3-token verify keeping 1, dropping the rest `how`, then a 1-token step)."""
    main.prefill(ids)
    times = []
    for i in range(STEPS):
        t0 = time.perf_counter()
        main.verify(ids[i:i + 3])
        (main.keep if how == "mask" else lambda n: cut(main, n))(1)
        main.verify(ids[i:i + 1])
        times.append(time.perf_counter() - t0)
    return 1000 * float(np.median(times[2:]))


def width_round(main: StatefulMain, ids, pattern) -> dict:
    main.prefill(ids)
    times: dict = {w: [] for w in set(pattern)}
    for i in range(STEPS):
        w = pattern[i % len(pattern)]
        t0 = time.perf_counter()
        main.verify(ids[i:i + w])
        seconds = time.perf_counter() - t0
        main.keep(1)
        if i >= 2:
            times[w].append(seconds)
    return {w: 1000 * float(np.median(t)) for w, t in times.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="qwen2.5-coder-embedded")
    ap.add_argument("--format", default="int4_channel")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    folder = prepare_candidates(load_presets(None).get(args.preset), ModelStore(None), [args.format], [])[("main", args.format)]
    info = machine_info()
    print(f"CPU: {info.get('cpu_model')}; flags {' '.join(info.get('isa_flags', []))}", flush=True)
    main = StatefulMain(folder, cpu_config(None, "f32"))
    ids = [int(t) for t in np.random.default_rng(0).integers(100, 20000, 300)]
    trim_round(main, ids, "mask"), width_round(main, ids, [1, 2])  # untimed: kernels built
    rows = []
    patterns = {"1": [1], "2": [2], "1,2 alternating": [1, 2]}
    for r in range(args.rounds):
        row = {"mask_ms": trim_round(main, ids, "mask"), "cut_ms": trim_round(main, ids, "cut")}
        if r % 2:  # the other order every other round
            row["cut_ms"], row["mask_ms"] = trim_round(main, ids, "cut"), trim_round(main, ids, "mask")
        for name, pattern in (patterns.items() if r % 2 == 0 else reversed(patterns.items())):
            row[name] = width_round(main, ids, pattern)
        rows.append(row)
        print(f"round {r + 1}: verify 3 keep 1 + 1 step: mask {row['mask_ms']:.1f} ms, cut {row['cut_ms']:.1f} ms; "
              f"1 a step {row['1'][1]:.1f} ms, 2 a step {row['2'][2]:.1f} ms, alternating "
              f"{row['1,2 alternating'][1]:.1f} / {row['1,2 alternating'][2]:.1f} ms", flush=True)
    med = lambda xs: float(np.median(xs))  # noqa: E731
    summary = {"cut_minus_mask_ms": med([r["cut_ms"] - r["mask_ms"] for r in rows]),
               "alternating_1_minus_steady_1_ms": med([r["1,2 alternating"][1] - r["1"][1] for r in rows]),
               "alternating_2_minus_steady_2_ms": med([r["1,2 alternating"][2] - r["2"][2] for r in rows])}
    print("paired medians: " + ", ".join(f"{k} {v:.1f}" for k, v in summary.items()))
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "format": args.format, "rounds": rows,
                                         "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
