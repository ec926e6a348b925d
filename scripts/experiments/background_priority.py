"""Experiment (issue 32, docs/running.md): does background work in a child process yield the
cores to the app? The foreground is one busy process per core (as a race); beside it, a busy
child in a session of its own at nice 19, started two ways: as demo.core.isolation starts a
conversion now (lower_priority: its session's autogroup niced too) and as it did before (nice
alone). Prints the foreground's work beside each child as a share of its work alone, with the
kernel's sched_autogroup_enabled (where it is 1, the default on most distributions, nice
alone only ranks a task within its own session), and writes them to a JSON file.

    python scripts/experiments/background_priority.py [--seconds 6] [--out FILE]
"""

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def spin(args: dict, send=None) -> dict:
    """Count loop turns for args["s"] seconds (an isolation target: module:function)."""
    end, n = time.time() + args["s"], 0
    while time.time() < end:
        n += 1
    return {"n": n}


def _count(seconds: float, out) -> None:
    out.put(spin({"s": seconds})["n"])


def foreground(seconds: float) -> int:
    out = mp.Queue()
    workers = [mp.Process(target=_count, args=(seconds, out)) for _ in range(os.cpu_count() or 1)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return sum(out.get() for _ in workers)


def main() -> None:
    from demo.core import isolation
    from demo.core.machine import machine_info

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--out", default="bench-results/background-priority.json")
    args = parser.parse_args()
    target = "scripts.experiments.background_priority:spin"
    ways = {
        "isolation now (session niced too)": lambda s: isolation.run(target, {"s": s}, what="spinning", nice=19),
        "nice alone (before)": lambda s: subprocess.run(
            [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r}); "
                                   f"from scripts.experiments.background_priority import spin; spin({{'s': {s}}})"],
            start_new_session=True, preexec_fn=lambda: os.nice(19), check=True),
    }
    try:
        autogroup = Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip()
    except OSError:
        autogroup = "absent"
    alone = foreground(args.seconds)
    shares = {}
    for name, start in ways.items():
        child = threading.Thread(target=start, args=(args.seconds + 2,))
        child.start()
        time.sleep(0.8)  # the child is running before the foreground starts
        shares[name] = foreground(args.seconds) / alone
        child.join()
        print(f"{name}: the foreground did {shares[name]:.2f} of its work alone "
              f"(sched_autogroup_enabled {autogroup})", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"sched_autogroup_enabled": autogroup, "foreground_share": shares,
                                          "machine": machine_info()}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
