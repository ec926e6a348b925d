"""`python -m demo.calibrate`: measure this machine for a preset.

    python -m demo.calibrate --preset NAME [--json PATH] [--main-formats gguf,int8,f16]
                             [--draft-formats gguf,int8] [--k-max 8] [--force]

How it measures and chooses: demo/calibrate/calibration.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional

from ..core.errors import DemoError, run_command
from ..models.calibration_store import load_cached
from .calibration import (DEFAULT_DRAFT_FORMATS, DEFAULT_K_MAX, DEFAULT_MAIN_FORMATS, DEFAULT_NEW_TOKENS,
                          DEFAULT_PROMPT_CLASSES, DEFAULT_PROMPTS_PER_CLASS, calibrate)
from .report import against_sweep, summary_lines, write_plot


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m demo.calibrate", description="Calibrate a preset on this machine: which weight formats and how many assistant tokens.")
    ap.add_argument("--preset", help="preset name (default: models.yaml's default)")
    ap.add_argument("--json", type=Path, help="also write the result here")
    ap.add_argument("--plot", type=Path, help="write the verify-cost curves as a PNG here")
    ap.add_argument("--main-formats", default=",".join(DEFAULT_MAIN_FORMATS))
    ap.add_argument("--draft-formats", default=",".join(DEFAULT_DRAFT_FORMATS))
    ap.add_argument("--k-max", type=int, default=DEFAULT_K_MAX)
    ap.add_argument("--prompts", default=",".join(DEFAULT_PROMPT_CLASSES), metavar="CLASS[,CLASS…]",
                    help="benchmark prompt classes to measure acceptance on: code,chat,summarize (default code)")
    ap.add_argument("--limit-prompts", type=int, default=DEFAULT_PROMPTS_PER_CLASS, metavar="N",
                    help=f"the first N prompts of each class (default {DEFAULT_PROMPTS_PER_CLASS})")
    ap.add_argument("--max-new-tokens", type=int, default=DEFAULT_NEW_TOKENS)
    ap.add_argument("--force", action="store_true", help="measure again even if this machine has a result")
    ap.add_argument("--against", type=Path, metavar="BENCH_JSON",
                    help="compare the choice with a measured sweep (python -m demo.bench --json, formats × K)")
    ap.add_argument("--models", type=Path)
    ap.add_argument("--cache-dir", type=Path)
    args = ap.parse_args(argv)

    def body() -> int:
        from ..models.presets import load_presets
        from ..models.sources import ModelStore

        from ..core.bench_prompts import select

        if not 1 <= args.k_max <= 16:
            raise DemoError("--k-max must be from 1 to 16.")
        if not 1 <= args.limit_prompts <= 10 or not 16 <= args.max_new_tokens <= 512:
            raise DemoError("--limit-prompts must be from 1 to 10 and --max-new-tokens from 16 to 512.")
        texts = [p.text for p in select([c.strip() for c in args.prompts.split(",") if c.strip()], args.limit_prompts)]
        store = ModelStore(args.cache_dir)
        preset = load_presets(args.models).get(args.preset)
        result = None if args.force else load_cached(store, preset)
        if result is None:
            result = calibrate(preset, store, main_formats=_formats(args.main_formats),
                               draft_formats=_formats(args.draft_formats), k_max=args.k_max,
                               prompts=texts, max_new_tokens=args.max_new_tokens, report=lambda m: print(f"  … {m}", file=sys.stderr, flush=True))
        else:
            print("(cached for this machine; --force measures again)", file=sys.stderr)
        print("\n".join(summary_lines(result)))
        if args.json:
            args.json.write_text(result.to_json())
        if args.plot:
            write_plot(result, args.plot)
        if args.against:
            try:
                sweep = json.loads(args.against.read_text())
            except (OSError, ValueError) as e:
                raise DemoError(f"Could not read the sweep {args.against} ({e}); pass a file python -m demo.bench --json wrote.")
            modes = {a["mode"] for a in sweep.get("aggregates", [])}
            for mode in ("fair", "race"):
                if modes & ({"sequential", "fair"} if mode == "fair" else {"race"}):
                    print("\n".join(against_sweep(result, sweep, mode)))
        return 0

    return run_command(body, interrupted="calibration interrupted; nothing was saved")


def _formats(text: str) -> list[str]:
    from ..models.formats import FORMATS

    out = [f.strip() for f in text.split(",") if f.strip()]
    bad = [f for f in out if f not in FORMATS]
    if not out or bad:
        raise DemoError(f"Formats must be a comma-separated list of: {', '.join(FORMATS)}.")
    return out


if __name__ == "__main__":
    sys.exit(main())
