"""Experiment (issue 32, BENCHMARKS.md): how long unpacking a GGUF-derived IR's weights to f16
takes, the first step of every int4/int8/f16 conversion. The app's way (demo/models/
gguf_unpack.py: one compiled dequantizer, chunk by chunk, into the constants' own memory)
against the numpy way it replaced (kept below as the reference), interleaved round by round
(the order alternating), each in a fresh child process so neither inherits the other's
memory. Checks that both give the same f16 bits for every weight, prints the seconds and the
paired ratios, and writes them to a JSON file.

    python scripts/experiments/unpack_speed.py GGUF_IR_FOLDER [--rounds 3] [--out FILE]
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def numpy_value(blocks):
    """The numpy unpacking the app used before (stop 42): (q - zp) * scale at f32, cast to f16."""
    import numpy as np

    from demo.models.gguf_unpack import _integers

    w = _integers(blocks.values).astype(np.float32)
    if blocks.zero is not None:
        w -= blocks.zero.astype(np.float32)
    w *= np.asarray(blocks.scale.get_data(), dtype=np.float32)
    return w.astype(np.float16)


def one_run(folder: str, way: str, check: bool) -> dict:
    """In this (child) process: unpack every weight one way; with `check`, compare with the other."""
    import hashlib

    import numpy as np
    import openvino as ov

    from demo.models import gguf_unpack

    model = ov.Core().read_model(str(Path(folder) / "openvino_model.xml"))
    layouts = [b for b in map(gguf_unpack.blocks_of, gguf_unpack.weight_outputs(model)) if b is not None]
    dequantizer = gguf_unpack.Dequantizer()
    value = dequantizer.value if way == "compiled" else numpy_value
    digest, mismatches, started = hashlib.sha256(), 0, time.perf_counter()
    for blocks in layouts:
        v = value(blocks)
        digest.update(v.view(np.uint16).tobytes()[:4096])
        if check:
            other = numpy_value(blocks) if way == "compiled" else dequantizer.value(blocks)
            mismatches += not np.array_equal(v.view(np.uint16), other.view(np.uint16))
        del v
    return {"seconds": time.perf_counter() - started, "weights": len(layouts), "mismatches": mismatches,
            "digest": digest.hexdigest()[:16]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="bench-results/unpack-speed.json")
    parser.add_argument("--child", choices=["compiled", "numpy"], help=argparse.SUPPRESS)
    parser.add_argument("--check", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_run(args.folder, args.child, args.check)))
        return

    from demo.core.machine import machine_info

    def child(way: str, check: bool = False) -> dict:
        cmd = [sys.executable, __file__, args.folder, "--child", way] + (["--check"] if check else [])
        return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout)

    checked = child("compiled", check=True)
    print(f"{checked['weights']} weights, {checked['mismatches']} differ in any f16 bit")
    runs = []
    for r in range(args.rounds):
        order = ["compiled", "numpy"] if r % 2 == 0 else ["numpy", "compiled"]
        got = {way: child(way)["seconds"] for way in order}
        runs.append(got)
        print(f"round {r + 1}: compiled {got['compiled']:.1f} s, numpy {got['numpy']:.1f} s, "
              f"ratio {got['compiled'] / got['numpy']:.2f}", flush=True)
    ratios = [g["compiled"] / g["numpy"] for g in runs]
    summary = {"folder": args.folder, "rounds": runs, "ratio_median": statistics.median(ratios),
               "ratio_range": [min(ratios), max(ratios)], "mismatches": checked["mismatches"],
               "weights": checked["weights"], "machine": machine_info()}
    print(f"compiled ÷ numpy, median of {len(ratios)}: {summary['ratio_median']:.2f} "
          f"({min(ratios):.2f}-{max(ratios):.2f})")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
