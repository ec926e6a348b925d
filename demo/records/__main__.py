"""`python -m demo.records export-csv OUT.csv`: the operator's copy of the scoreboard.

Every row, with every prompt the page kept (--keep-prompts); the page's own Export CSV gives
visitors only the newest rows and no prompt text (demo.records.csv_export).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

from ..core.errors import DemoError, run_command


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m demo.records", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    export = sub.add_parser("export-csv", help="write the whole scoreboard, prompts included, as CSV")
    export.add_argument("out", type=Path, help="the CSV file to write")
    export.add_argument("--cache-dir", type=Path, help="the app's cache folder (default: $SPECDEC_CACHE_DIR or "
                                                       "~/.cache/speculative-arena)")
    export.add_argument("--db", type=Path, help="the scoreboard file itself (default: <cache>/scoreboard.sqlite)")
    return ap


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(lambda: _export(args))


def _export(args) -> int:
    from ..models.sources import ModelStore
    from .scoreboard import FILE_NAME, Scoreboard

    db = args.db or Path(ModelStore(args.cache_dir).cache_dir) / FILE_NAME
    if not db.is_file():
        raise DemoError(f"There is no scoreboard at {db}; pass --cache-dir or --db.")
    if not args.out.parent.expanduser().resolve().is_dir():
        raise DemoError(f"The folder for {args.out} does not exist; create it or choose another path.")
    n = Scoreboard(db).export_csv(args.out, for_operator=True)
    print(f"{n} races written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
