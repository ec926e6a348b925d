"""Experiment (BENCHMARKS.md, issue 20): what the CPU plugin's activation precision and
dynamic-quantization group do to one forward step of M tokens, per model folder.

Each folder is compiled once per configuration (a JSON of CPU properties) and driven directly
(no pipeline): after a 100-token prefix, steps of M = 1, 4, 7 and 9 new tokens, median of 12.
The configurations are measured one after another, each folder in turn.

    python scripts/experiments/cpu_precision.py MAIN_IR DRAFT_IR --config bf16='{"INFERENCE_PRECISION_HINT": "bf16"}' \
        --config f32='{"INFERENCE_PRECISION_HINT": "f32"}' --json bench-results/cpu-precision.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from demo.core.machine import machine_info  # noqa: E402

MS = (1, 4, 7, 9)
PREFIX = 100


def step_ms(folder: Path, config: dict) -> dict:
    import openvino as ov

    compiled = ov.Core().compile_model(str(folder / "openvino_model.xml"), "CPU", config)
    request = compiled.create_infer_request()

    def feed(ids, past):
        ids = np.asarray(ids, np.int64)[None]
        n = ids.shape[1]
        request.infer({"input_ids": ids, "attention_mask": np.ones((1, past + n), np.int64),
                       "position_ids": np.arange(past, past + n)[None], "beam_idx": np.zeros(1, np.int32)})

    out = {"dynamic_quantization_group": int(compiled.get_property("DYNAMIC_QUANTIZATION_GROUP_SIZE")),
           "precision": str(compiled.get_property("INFERENCE_PRECISION_HINT"))}
    for m in MS:
        times = []
        for _ in range(4):
            request.reset_state()
            feed([(i * 7919) % 30000 + 100 for i in range(PREFIX)], 0)
            past = PREFIX
            for s in range(3):
                t = time.perf_counter()
                feed([1000 + s + j for j in range(m)], past)
                times.append((time.perf_counter() - t) * 1e3)
                past += m
        out[f"M={m}"] = statistics.median(times)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--config", action="append", required=True, metavar="NAME=JSON")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    configs = {name: json.loads(props) for name, _, props in (c.partition("=") for c in args.config)}
    info = machine_info()
    print(f"CPU: {info.get('cpu_model')}; flags {' '.join(info.get('isa_flags', []))}", flush=True)
    results: dict = {}
    for folder in args.folders:
        for name, config in configs.items():
            try:
                r = step_ms(folder, config)
            except RuntimeError as e:  # a configuration this plugin cannot compile is a finding too
                r = {"error": str(e).strip().splitlines()[-1]}
            results.setdefault(folder.name, {})[name] = r
            cells = (r["error"] if "error" in r else
                     "  ".join(f"{m} {r[m]:6.1f} ms" for m in (f"M={m}" for m in MS))
                     + f"  M=7/M=1 {r['M=7'] / r['M=1']:.2f} (precision {r['precision']}, "
                       f"quantization group {r['dynamic_quantization_group']})")
            print(f"{folder.name[:44]:44s} {name:10s} {cells}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "prefix_tokens": PREFIX, "configs": configs,
                                         "median_ms": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
