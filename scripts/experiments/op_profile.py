"""Experiment (issue 30, item 2): where one single-token decoding step of a main model spends
its time, by operation, from OpenVINO's own performance counters (PERF_COUNT), beside the
bytes that step reads and this machine's memory read bandwidth.

    python scripts/experiments/op_profile.py MAIN_IR [--threads N] [--steps 24] [--tokens M] [--json OUT.json]

The IR is compiled as calibration drives it (demo.engine.stateful: the pipelines' CPU
properties, f32 activations), a prompt is prefilled, then `--steps` tokens are decoded
greedily one at a time; each step's counters are summed by (operation type, kernel) and
averaged over the steps. `--tokens M` feeds M tokens a step instead of one (the greedy token
repeated): the shape of a speculative verify of M-1 guesses. Printed: ms a token per row and its share of the step, the step's
achieved bandwidth (bytes read ÷ step time) and the machine's read bandwidth.
"""

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from demo.core.machine import machine_info  # noqa: E402
from demo.engine.stateful import cpu_config  # noqa: E402
from lab.weights_read import ir_bytes_per_token, memory_read_gb_s  # noqa: E402

PROMPT_TOKENS = 64


def profile(folder: Path, threads, steps: int, tokens: int = 1) -> dict:
    import numpy as np
    import openvino as ov

    compiled = ov.Core().compile_model(str(folder / "openvino_model.xml"), "CPU", {**cpu_config(threads), "PERF_COUNT": "YES"})
    request = compiled.create_infer_request()

    def feed(ids, past):
        n = len(ids)
        return request.infer({"input_ids": np.asarray([ids], dtype=np.int64),
                              "attention_mask": np.ones((1, past + n), dtype=np.int64),
                              "position_ids": np.arange(past, past + n, dtype=np.int64)[None, :],
                              "beam_idx": np.zeros(1, dtype=np.int32)})["logits"]

    request.reset_state()
    logits = feed(list(range(100, 100 + PROMPT_TOKENS)), 0)
    past, token = PROMPT_TOKENS, int(logits[0, -1].argmax())
    rows: dict = defaultdict(float)
    wall = []
    for _ in range(steps):
        t = time.perf_counter()
        logits = feed([token] * tokens, past)
        wall.append(time.perf_counter() - t)
        for info in request.profiling_info:
            if info.status == ov.ProfilingInfo.Status.EXECUTED:
                rows[(info.node_type, info.exec_type)] += info.real_time.total_seconds()
        past, token = past + tokens, int(logits[0, -1].argmax())
    counted = sum(rows.values()) / steps
    return {"step_ms_median": sorted(wall)[len(wall) // 2] * 1000, "counted_ms": counted * 1000,
            "by_op": sorted(({"op": op, "kernel": kernel, "ms": s / steps * 1000, "share": s / steps / counted}
                             for (op, kernel), s in rows.items()), key=lambda r: -r["ms"])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (default: OpenVINO's, all cores)")
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--tokens", type=int, default=1, help="tokens fed a step (a verify of M-1 guesses: M)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    read = ir_bytes_per_token(args.folder)["per_token"]
    bandwidth = memory_read_gb_s(args.threads or machine_info()["cores"])
    result = {"folder": args.folder.name, "threads": args.threads, "tokens": args.tokens, "bytes_per_token": read,
              "machine_read_gb_s": bandwidth, **profile(args.folder, args.threads, args.steps, args.tokens),
              "machine": machine_info()}
    achieved = read / (result["step_ms_median"] / 1000) / 1e9
    print(f"{args.folder.name}: a step of {args.tokens} token{'s' if args.tokens > 1 else ''} {result['step_ms_median']:.1f} ms (median of {args.steps}; counters "
          f"account for {result['counted_ms']:.1f} ms), reads {read / 1e9:.2f} GB: {achieved:.1f} GB/s against "
          f"{bandwidth:.1f} GB/s this machine reads ({achieved / bandwidth:.0%})")
    for r in result["by_op"][:12]:
        print(f"  {r['op']:<28s} {r['kernel']:<36s} {r['ms']:7.2f} ms  {r['share']:5.1%}")
    result["achieved_gb_s"] = achieved
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
