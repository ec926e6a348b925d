"""Prepare a preset's models ahead of time.

    python -m demo.prepare                 # the default preset
    python -m demo.prepare --preset NAME   # another one
    python -m demo.prepare --list          # every preset, and whether it is ready
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .errors import DemoError, run_command
from .presets import Preset, load_presets
from .sources import ModelStore, Progress, _no_progress


@dataclass
class PreparedPair:
    preset: Preset
    main: Path
    draft: Optional[Path]
    reused: bool
    seconds: float


def prepare_preset(preset: Preset, store: ModelStore, progress: Progress = _no_progress) -> PreparedPair:
    """Prepare main and draft, then check that they share a tokenizer."""
    main = store.prepare(preset.main, role="main model", progress=progress)
    draft = store.prepare(preset.draft, role="draft model", progress=progress) if preset.draft else None
    if draft is not None and draft.path != main.path:
        check_same_tokenizer(main.path, draft.path, preset.name)
    return PreparedPair(
        preset,
        main.path,
        draft.path if draft else None,
        reused=main.reused and (draft is None or draft.reused),
        seconds=main.seconds + (draft.seconds if draft else 0.0),
    )


def check_same_tokenizer(main: Path, draft: Path, preset_name: str) -> None:
    """Fail early, naming the preset, when draft and main would disagree on token ids.

    OpenVINO GenAI would refuse the pair later with "Tokenizers for draft and main models
    are different!", without saying which preset caused it.
    """
    import openvino_genai

    main_tok = openvino_genai.Tokenizer(str(main))
    draft_tok = openvino_genai.Tokenizer(str(draft))
    if (
        main_tok.get_vocab() != draft_tok.get_vocab()
        or main_tok.get_eos_token_id() != draft_tok.get_eos_token_id()
    ):
        raise DemoError(
            f"Preset {preset_name!r}: the draft model's tokenizer differs from the main model's, so it "
            "cannot draft for it; pick a draft from the same model family."
        )


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
    ap.add_argument("--list", action="store_true", help="list presets and whether each is ready")
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
        return 0
    preset = presets.get(args.preset)
    bar = _TqdmProgress()
    try:
        pair = prepare_preset(preset, store, bar)
    finally:
        bar.close()
    verb = "already prepared" if pair.reused else "prepared"
    print(f"{preset.name}: {verb} in {pair.seconds:.1f} s")
    print(f"  main : {pair.main}")
    if pair.draft:
        print(f"  draft: {pair.draft}")
    return 0



if __name__ == "__main__":
    sys.exit(main())
