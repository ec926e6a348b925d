"""Which weight formats and thread counts OpenVINO runs on this CPU, for one preset.

    python -m demo.doctor [--preset NAME] [--formats gguf,int8,int4_sym,f16] [--threads 1,2,default]
                          [--prepare] [--cache-dir DIR]

Each format × thread count of the main and draft models is compiled and run (a 100-token
prefill, then a few decoding steps) in a child process, so a crash in OpenVINO's native code
(SIGFPE, SIGSEGV) or a hang is reported here instead of taking anything down. The results
go to this machine's safety record (demo.engine.native_guard), which the app and calibration read: a
configuration that crashes is never used. Formats not prepared yet are listed as such
unless --prepare converts them first (minutes each).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

from .calibrate.doctor import diagnose, table, thread_counts
from .core.errors import run_command
from .engine.native_guard import CRASHES


def main(argv: Optional[list[str]] = None) -> int:
    from .core.settings import cpu_cores

    ap = argparse.ArgumentParser(prog="python -m demo.doctor", description=__doc__.split("\n")[0])
    ap.add_argument("--preset", help="preset name (default: models.yaml's default)")
    ap.add_argument("--formats", default="gguf,int8,int4_sym,f16", help="weight formats to check (pypi/gguf models)")
    ap.add_argument("--threads", default=f"1,{cpu_cores()},default" if cpu_cores() > 1 else "1,default",
                    help="CPU thread counts to check, 'default' = OpenVINO's own")
    ap.add_argument("--prepare", action="store_true", help="convert formats that are not prepared yet")
    ap.add_argument("--models", type=Path)
    ap.add_argument("--cache-dir", type=Path)
    args = ap.parse_args(argv)

    def body() -> int:
        from .core.machine import machine_info
        from .models.presets import load_presets
        from .models.sources import ModelStore

        preset = load_presets(args.models).get(args.preset)
        store = ModelStore(args.cache_dir)
        info = machine_info()
        print(f"{info['cpu_model']}, {info['cores']} cores; {' '.join(info['isa_flags'])}", file=sys.stderr)
        rows = diagnose(preset, store, [f.strip() for f in args.formats.split(",") if f.strip()],
                        thread_counts(args.threads, cpu_cores()), args.prepare,
                        report=lambda m: print(f"  … {m}", file=sys.stderr, flush=True))
        print(table(rows))
        return 1 if any(r["status"] == CRASHES for r in rows) else 0

    return run_command(body)


if __name__ == "__main__":
    sys.exit(main())
