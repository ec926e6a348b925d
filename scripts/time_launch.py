"""Time `python app.py` from start to "[arena] ready", printing every line it writes with
the seconds since start (what BENCHMARKS.md's first-launch numbers come from).

    python scripts/time_launch.py CACHE_DIR [PORT]     # an empty CACHE_DIR times a first launch

It stops the app once it says ready (or reports an error) and prints TOTAL.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2:
        print(__doc__, file=sys.stderr)
        return 2
    cache, port = argv[0], argv[1] if len(argv) > 1 else "7860"
    t0 = time.time()
    app = subprocess.Popen([sys.executable, "-u", str(ROOT / "app.py"), "--cache-dir", cache, "--port", port],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    ready = False
    try:
        for line in app.stdout:
            print(f"{time.time() - t0:7.1f}s {line.rstrip()[:200]}", flush=True)
            if line.strip().endswith("ready") or "error:" in line:
                ready = line.strip().endswith("ready")
                break
    finally:
        print(f"TOTAL {time.time() - t0:.1f}s", flush=True)
        os.killpg(app.pid, signal.SIGTERM)
    return 0 if ready else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
