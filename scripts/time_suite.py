"""Time the README's test command on this machine and keep the record (the README's test-time
figure is generated from these records by scripts/figures.py).

    python scripts/time_suite.py --json bench-results/test-suite-CLASS-YYYY-MM-DD-clean-clone.json [--busy]
        [-- COMMAND …]                        # default: bash scripts/test.sh

Run it from a clean clone for a clean-clone figure. --busy runs a CPU-bound job on one core for
the whole run (the suite must pass on a busy machine too, issue 59 item 12), and says so in the record.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from demo.core.machine import machine_info  # noqa: E402


def spin(stop) -> None:
    """One core kept busy until `stop` is set."""
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--busy", action="store_true", help="keep one core busy with another job meanwhile")
    ap.add_argument("command", nargs="*", default=["bash", "scripts/test.sh"])
    args = ap.parse_args()
    stop = multiprocessing.Event()
    busy = multiprocessing.Process(target=spin, args=(stop,), daemon=True) if args.busy else None
    if busy:
        busy.start()
    started = time.perf_counter()
    out = []
    with subprocess.Popen(args.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as run:
        for line in run.stdout:
            print(line, end="", flush=True)
            out.append(line)
    seconds = time.perf_counter() - started
    if busy:
        stop.set()
        busy.join()
    verdict = next((line.strip(" =\n") for line in reversed(out) if re.search(r"\d+ (passed|failed)", line)), None)
    record = {"command": " ".join(args.command), "returncode": run.returncode, "seconds": round(seconds, 1),
              "pytest": verdict, "busy_core": bool(busy), "installed_first": any("== installing requirements" in line for line in out),
              "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip(),
              "machine": machine_info()}
    args.json.write_text(json.dumps(record, indent=1))
    print(f"time_suite: {seconds / 60:.1f} minutes, exit {run.returncode} ({verdict}); wrote {args.json}")
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
