"""Prepare a preset's pair: main and draft in their weight formats, checked to share a
tokenizer. The command line is demo.prepare (`python -m demo.prepare`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..core.errors import DemoError
from .presets import Preset
from .room import check_room
from .sources import ModelStore, Progress, no_progress


@dataclass
class PreparedPair:
    preset: Preset
    main: Path
    draft: Optional[Path]
    reused: bool
    seconds: float
    # The weight format each folder holds (demo/models/formats.py); None for a source used as shipped.
    main_format: Optional[str] = None
    draft_format: Optional[str] = None
    # The main model as the baseline runs it, when not in the speculative side's format:
    # this machine's fastest without a draft (demo.calibrate), so the speedup is against the
    # best it does alone. None: the baseline runs `main`.
    baseline: Optional[Path] = None
    baseline_format: Optional[str] = None

    @property
    def baseline_main(self) -> Path:
        return self.baseline or self.main

    @property
    def baseline_main_format(self) -> Optional[str]:
        return self.baseline_format if self.baseline is not None else self.main_format


def prepare_preset(preset: Preset, store: ModelStore, progress: Progress = no_progress,
                   main_format: Optional[str] = None, draft_format: Optional[str] = None,
                   cancel: Optional[threading.Event] = None, baseline_format: Optional[str] = None) -> PreparedPair:
    """Prepare main and draft, then check that they share a tokenizer.

    `main_format` / `draft_format` ask for a weight format other than the preset's own
    (None: what models.yaml says); `baseline_format`, the main model's format for the baseline
    side when it differs; `cancel` stops the preparing (demo.models.sources.Cancelled).
    A prepare that would not fit on its disk or in memory is refused first (demo.models.room).
    """
    if preset.draft is None and draft_format is not None:
        raise DemoError(f"Preset {preset.name!r} has no draft model, so it takes no draft format.")
    check_room(preset, store, main_format, draft_format)  # before anything is downloaded, exported or converted
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
    baseline = None
    if baseline_format is not None and baseline_format != main.weight_format:
        baseline = store.prepare(preset.main, role="main model (baseline)", progress=progress,
                                 weight_format=baseline_format, cancel=cancel)
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
        baseline=baseline.path if baseline is not None and baseline.path != main.path else None,
        baseline_format=baseline.weight_format if baseline is not None and baseline.path != main.path else None,
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
