"""Would the test suite run faster with each pytest worker kept to a core of its own? Two
processes decoding with OpenVINO at once, as the suite's two workers do, timed with every core
each against one core each (`taskset`), interleaved round by round (which goes first alternates).

    python scripts/experiments/worker_cores.py [--rounds 3] [--tokens 200]
                                               [--json bench-results/worker-cores-<cpu>-<date>.json]

Each process loads the SmolLM2 test fixture's gguf IR (prepared in $SPECDEC_CACHE_DIR, as the
suite prepares it) and generates `--tokens` tokens greedily four times; a round's time is the
later of the two to finish. The answer (docs/testing.md): faster, but not used, since a worker
kept to one core sees a one-core machine, where an f16 model compiled with one thread traps
SIGFPE in-process on the Xeon with AMX (docs/crashes.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from demo.core.errors import run_command  # noqa: E402
from demo.core.machine import machine_info  # noqa: E402
from demo.models.presets import load_presets  # noqa: E402
from demo.models.sources import ModelStore  # noqa: E402

DECODE = """
import sys, openvino_genai as g
pipe = g.LLMPipeline(sys.argv[1], "CPU")
config = g.GenerationConfig(); config.max_new_tokens = int(sys.argv[2]); config.ignore_eos = True
for _ in range(4):
    pipe.generate("Write a Python function that reverses a string.", config)
"""


def two_at_once(folder: Path, tokens: int, pinned: bool) -> float:
    cores = sorted(os.sched_getaffinity(0))
    start = time.perf_counter()
    procs = [subprocess.Popen((["taskset", "-c", str(cores[i % len(cores)])] if pinned else [])
                              + [sys.executable, "-c", DECODE, str(folder), str(tokens)]) for i in range(2)]
    if any(p.wait() != 0 for p in procs):
        raise SystemExit("a decoding process failed; see its output above")
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    def body() -> int:
        folder = ModelStore().prepare(load_presets().get("smollm2-self-draft").main, role="main model").path
        rounds = []
        for n in range(args.rounds):
            order = (False, True) if n % 2 == 0 else (True, False)
            times = {("one_core_each" if pinned else "every_core_each"): two_at_once(folder, args.tokens, pinned)
                     for pinned in order}
            times["ratio"] = times["every_core_each"] / times["one_core_each"]
            rounds.append(times)
            print(f"round {n + 1}: every core each {times['every_core_each']:.1f} s, one core each "
                  f"{times['one_core_each']:.1f} s: {times['ratio']:.2f}x", flush=True)
        median = statistics.median(r["ratio"] for r in rounds)
        print(f"median: two processes with every core each take {median:.2f}x the time of one core each")
        if args.json:
            args.json.write_text(json.dumps({"command": " ".join(sys.argv), "rounds": rounds, "median_ratio": median,
                                             "tokens": args.tokens, "machine": machine_info()}, indent=1) + "\n")
        return 0

    return run_command(body)


if __name__ == "__main__":
    sys.exit(main())
