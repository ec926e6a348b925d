"""Experiment (issue 32): does OpenVINO's model cache (CACHE_DIR) take compile time off a launch?
Constructs one IR folder's paged LLMPipeline (the arena's scheduler settings, f32 activations)
without a cache and with one (the first run writes the blob, later ones import it),
alternated, and times the construction and the first 4-token generate (the warm-up's cost).

    python scripts/experiments/compile_cache.py MAIN_IR --rounds 2 --json bench-results/compile-cache.json
"""

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from demo.core.machine import machine_info  # noqa: E402
from demo.core.settings import PipelineOptions  # noqa: E402
from demo.engine.openvino_runner import scheduler_config  # noqa: E402


def build_and_warm(folder: str, props: dict) -> tuple[float, float]:
    import openvino_genai as ov

    t = time.perf_counter()
    pipe = ov.LLMPipeline(folder, "CPU", scheduler_config=scheduler_config(PipelineOptions()),
                          INFERENCE_PRECISION_HINT="f32", **props)
    built = time.perf_counter() - t
    t = time.perf_counter()
    pipe.generate("def f(x):", max_new_tokens=4)
    return built, time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    cache = Path(tempfile.mkdtemp(prefix="ov-model-cache-"))
    rows = []
    try:
        for r in range(args.rounds):
            for name, props in (("no cache", {}), ("CACHE_DIR", {"CACHE_DIR": str(cache)})):
                built, first = build_and_warm(args.folder, props)
                rows.append({"round": r, "variant": name, "construct_s": built, "first_generate_s": first})
                print(f"round {r + 1} {name:>9}: construct {built:.2f} s, first 4-token generate {first:.2f} s", flush=True)
        blob_mb = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file()) / 1e6
        print(f"blob: {blob_mb:.0f} MB")
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps({"machine": machine_info(), "folder": args.folder, "rows": rows,
                                         "blob_mb": blob_mb}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
