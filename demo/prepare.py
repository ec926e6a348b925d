"""Prepare a preset's models ahead of time.

    python -m demo.prepare                 # the default preset
    python -m demo.prepare --preset NAME   # another one
    python -m demo.prepare --preset NAME --main-format f16 --draft-format int8
    python -m demo.prepare --list          # every preset, whether it is ready, which formats are
    python -m demo.prepare --datastore     # also the datastore of Python sources free drafting reads
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

from .core.errors import run_command
from .models.code_datastore import DEFAULT_BUDGET
from .models.formats import AUTO, FORMATS
from .models.prepare import prepare_preset
from .models.presets import Preset, load_presets
from .models.sources import ModelStore, has_formats


class _TqdmProgress:
    """Render Progress callbacks as one tqdm bar per stage."""

    def __init__(self):
        self.stage = None
        self.bar = None

    def __call__(self, stage: str, done: float, total: float) -> None:
        from tqdm import tqdm

        if stage != self.stage:
            self.close()
            self.stage = stage
            byte_stage = total > 1 << 20
            self.bar = tqdm(
                total=total or None, desc=stage, unit="B" if byte_stage else "it",
                unit_scale=byte_stage, leave=True, file=sys.stderr,
            )
        if self.bar is not None:
            self.bar.n = done
            self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m demo.prepare", description=__doc__.split("\n")[0])
    ap.add_argument("--preset", help="preset name from models.yaml (default: the file's default)")
    ap.add_argument("--list", action="store_true", help="list presets, whether each is ready and its prepared formats")
    choices = [*FORMATS, AUTO]
    ap.add_argument("--main-format", choices=choices, help="weight format of the main model (default: the preset's)")
    ap.add_argument("--draft-format", choices=choices, help="weight format of the draft model (default: the preset's)")
    ap.add_argument("--datastore", action="store_true",
                    help="also build the datastore of this machine's Python sources that free drafting guesses from "
                         f"(once per tokenizer; {DEFAULT_BUDGET:,} tokens, about {DEFAULT_BUDGET * 12 // 10**6} MB)")
    ap.add_argument("--models", type=Path, help="path to models.yaml (default: the repo's)")
    ap.add_argument("--cache-dir", type=Path, help="where prepared models live (default: $SPECDEC_CACHE_DIR or ~/.cache/speculative-arena)")
    args = ap.parse_args(argv)
    return run_command(lambda: _run(args), interrupted="interrupted; nothing half-prepared was kept")


def _run(args) -> int:
    presets = load_presets(args.models)
    store = ModelStore(args.cache_dir)
    if args.list:
        print(f"cache: {store.cache_dir}")
        for name, p in presets.presets.items():
            ready = store.is_ready(p.main) and (p.draft is None or store.is_ready(p.draft))
            mark = "ready" if ready else "not prepared"
            default = " (default)" if name == presets.default else ""
            print(f"  {name:28s} {mark:13s} {p.description}{default}")
            line = _formats_line(store, p)
            if line:
                print(f"      {line}")
        return 0
    preset = presets.get(args.preset)
    bar = _TqdmProgress()
    try:
        pair = prepare_preset(preset, store, bar, main_format=args.main_format, draft_format=args.draft_format)
    finally:
        bar.close()
    verb = "already prepared" if pair.reused else "prepared"
    held = ", ".join(f"{role} {fmt}" for role, fmt in (("main", pair.main_format), ("draft", pair.draft_format)) if fmt)
    print(f"{preset.name}: {verb} in {pair.seconds:.1f} s" + (f" (weight formats: {held})" if held else ""))
    print(f"  main : {pair.main}")
    if pair.draft:
        print(f"  draft: {pair.draft}")
    if args.datastore:
        _build_datastore(store, pair.main)
    return 0


def _build_datastore(store: ModelStore, main: Path) -> None:
    """The datastore for the main model's tokenizer, with a progress bar; says what it holds."""
    import time

    from .models import code_datastore

    bar = _TqdmProgress()
    started = time.perf_counter()
    try:
        ds = code_datastore.build(store.cache_dir, main, progress=bar, exclude=Path(__file__).resolve().parent.parent)
    finally:
        bar.close()
    print(f"  datastore: {len(ds.tokens):,} tokens of {ds.files:,} Python files installed here, {ds.nbytes / 1e6:.0f} MB "
          f"on disk and in the page cache when read ({time.perf_counter() - started:.0f} s)")
    print(f"             {code_datastore.folder_for(store.cache_dir, main)}")


def _formats_line(store: ModelStore, preset: Preset) -> str:
    """'prepared formats: main gguf, int8; draft none', for the models that have formats."""
    parts = []
    for role, spec in (("main", preset.main), ("draft", preset.draft)):
        if spec is None or not has_formats(spec):
            continue
        if role == "draft" and spec == preset.main:
            parts.append("draft = main")
            continue
        parts.append(f"{role} {', '.join(store.prepared_formats(spec)) or 'none'}")
    return f"prepared formats: {'; '.join(parts)}" if parts else ""



if __name__ == "__main__":
    sys.exit(main())
