"""What the two headline scripts share (scripts/headline.py, fair mode; scripts/race_headline.py,
race mode): their common arguments, and the arena with this machine's calibrated K for a mode."""

from __future__ import annotations

import argparse
from pathlib import Path

from demo.core.bench_prompts import HEADLINE_SET
from demo.core.errors import DemoError
from demo.engine.arena import Arena
from demo.engine.pipelines import PipelineCache
from demo.models.calibration_store import load_cached
from demo.models.presets import load_presets
from demo.models.sources import ModelStore


def add_common_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--preset", default="qwen2.5-coder-embedded")
    ap.add_argument("--prompts", type=int, default=len(HEADLINE_SET), choices=range(1, len(HEADLINE_SET) + 1),
                    help=f"held-out code prompts per round (of {', '.join(HEADLINE_SET)}; never calibration's)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--cache-dir", type=Path)
    ap.add_argument("--json", type=Path)


def calibrated(preset_name: str, cache_dir, mode: str):
    """(arena holding one pair at a time, preset, this machine's calibrated K for `mode`)."""
    arena = Arena(load_presets(None), ModelStore(cache_dir), PipelineCache(max_pairs=1))
    preset = arena.presets.get(preset_name)
    calibration = load_cached(arena.store, preset)
    if calibration is None or mode not in calibration.choice:
        raise DemoError(f"This machine has no calibration of {preset.name}; run: python -m demo.calibrate "
                        f"--preset {preset.name}")
    return arena, preset, calibration.choice[mode].k
