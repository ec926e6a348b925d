"""Experiment (issue 58): why does a second launch still take ~20 s to Ready? Constructs one IR
folder's paged LLMPipeline (the arena's scheduler settings, f32 activations) with each thread
count in turn, rounds alternating the order, and times the construction, the first 4-token
generate (where OpenVINO's CPU plugin repacks the int4 weights) and the second.

    python scripts/experiments/first_inference.py MAIN_IR --threads 1,2 --rounds 2 --json OUT.json
"""

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from demo.core.machine import machine_info  # noqa: E402


def once(folder: Path, threads: int) -> dict:
    import openvino_genai as ov_genai

    from demo.core import placement
    from demo.core.settings import PipelineOptions
    from demo.engine.openvino_runner import scheduler_config

    options = PipelineOptions(threads=threads)
    t0 = time.perf_counter()
    pipe = ov_genai.LLMPipeline(str(folder), "CPU", scheduler_config=scheduler_config(options),
                                **placement.pipeline_properties("CPU", options, "draft"))
    built = time.perf_counter()
    config = ov_genai.GenerationConfig()
    config.max_new_tokens = 4
    times = []
    for _ in range(2):
        t = time.perf_counter()
        pipe.generate("def add(a, b):", config)
        times.append(time.perf_counter() - t)
    return {"threads": threads, "construct_s": round(built - t0, 2), "first_generate_s": round(times[0], 2),
            "second_generate_s": round(times[1], 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    counts = [int(t) for t in args.threads.split(",")]
    samples = []
    for r in range(args.rounds):
        for threads in (counts if r % 2 == 0 else counts[::-1]):
            sample = {"round": r, **once(args.folder, threads)}
            print(sample, flush=True)
            samples.append(sample)
    info = machine_info()
    if args.json:
        args.json.write_text(json.dumps({"folder": args.folder.name, "samples": samples,
                                         "machine": {k: info.get(k) for k in ("cpu_model", "isa_flags", "cores")}},
                                        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
