"""Prepare a preset's models ahead of time.

    python -m demo.prepare                 # the default preset
    python -m demo.prepare --preset NAME   # another one
    python -m demo.prepare --preset NAME --main-format f16 --draft-format int8
    python -m demo.prepare --list          # every preset, whether it is ready, which formats are
"""

from __future__ import annotations

import argparse
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .errors import DemoError, run_command
from .formats import AUTO, FORMATS
from .presets import Preset, load_presets
from .sources import ModelStore, Progress, _no_progress, has_formats


@dataclass
class PreparedPair:
    preset: Preset
    main: Path
    draft: Optional[Path]
    reused: bool
    seconds: float
    # The weight format each folder holds (demo/formats.py); None for a source used as shipped.
    main_format: Optional[str] = None
    draft_format: Optional[str] = None


def prepare_preset(preset: Preset, store: ModelStore, progress: Progress = _no_progress,
                   main_format: Optional[str] = None, draft_format: Optional[str] = None,
                   cancel: Optional[threading.Event] = None) -> PreparedPair:
    """Prepare main and draft, then check that they share a tokenizer.

    `main_format` / `draft_format` ask for a weight format other than the preset's own
    (None: what models.yaml says); `cancel` stops the preparing (demo.sources.Cancelled).
    """
    if preset.draft is None and draft_format is not None:
        raise DemoError(f"Preset {preset.name!r} has no draft model, so it takes no draft format.")
    draft, failed = None, []
    if preset.draft is not None:
        # The draft is prepared beside the main model: checksums and conversions are mostly
        # one core each, so a first launch takes the longer of the two, not their sum.
        def prepare_draft():
            nonlocal draft
            try:
                draft = store.prepare(preset.draft, role="draft model", progress=progress,
                                      weight_format=draft_format, cancel=cancel)
            except BaseException as e:
                failed.append(e)

        worker = threading.Thread(target=prepare_draft, name="prepare-draft", daemon=True)
        worker.start()
    try:
        main = store.prepare(preset.main, role="main model", progress=progress, weight_format=main_format,
                             cancel=cancel)
    finally:
        if preset.draft is not None:
            worker.join()
    if failed:
        raise failed[0]
    if draft is not None and draft.path != main.path:
        check_same_tokenizer(main.path, draft.path, preset.name)
    return PreparedPair(
        preset,
        main.path,
        draft.path if draft else None,
        reused=main.reused and (draft is None or draft.reused),
        seconds=main.seconds + (draft.seconds if draft else 0.0),
        main_format=main.weight_format,
        draft_format=draft.weight_format if draft else None,
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
    ap.add_argument("--list", action="store_true", help="list presets, whether each is ready and its prepared formats")
    choices = [*FORMATS, AUTO]
    ap.add_argument("--main-format", choices=choices, help="weight format of the main model (default: the preset's)")
    ap.add_argument("--draft-format", choices=choices, help="weight format of the draft model (default: the preset's)")
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
    return 0


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
