"""The calibration a first launch runs: the engine's Calibrator (demo.engine.arena), made here.

`python app.py` hands a LaunchCalibrator to Arena.start_background_warmup; the engine calls
it without importing demo.calibrate, which sits above it. It measures the formats a launch
calibrates (calibration.launch_formats) with the launch plan (calibration.LAUNCH).
"""

from __future__ import annotations

import threading
from typing import Callable, ContextManager

from ..models import formats
from ..models.calibration_result import Calibration
from ..models.sources import has_formats
from . import calibration
from .report import summary_lines

EARLY_POLL_S = 1.0  # how often the early conversion looks for the pair's own IR


class LaunchCalibrator:
    """demo.engine.arena.Calibrator for a launch: the launch formats and plan."""

    def plan(self) -> dict:
        """The formats and plan of the calibration a launch runs, for this machine's ISA."""
        from ..core.machine import machine_info

        main, draft = calibration.launch_formats(machine_info()["isa_flags"])
        return {"main_formats": main, "draft_formats": draft, "plan": calibration.LAUNCH}

    def convert_early(self, preset, store, report: Callable[[str], None], stop: threading.Event) -> None:
        """Unpack the main model's GGUF weights to f16 (numpy, one core, low priority) as soon
        as the pair's own IR is on disk, when a launch format is made from f16: on 2 cores the
        pair's prepare and load leave one idle most of the time. The compression itself
        (NNCF, every core) waits until the pair is warm (prepare_candidates)."""
        if not has_formats(preset.main) or not any("f16" in formats.chain(f) for f in self.plan()["main_formats"]):
            return
        while store.ready_path(preset.main, formats.DEFAULT_FORMAT) is None:
            if stop.wait(EARLY_POLL_S):
                return
        calibration.prepare_candidates(preset, store, ["f16"], [], report=report, stop=stop)

    def prepare_candidates(self, preset, store, report: Callable[[str], None]) -> None:
        plan = self.plan()
        calibration.prepare_candidates(preset, store, plan["main_formats"], plan["draft_formats"], report=report)

    def calibrate(self, preset, store, report: Callable[[str], None],
                  slot: Callable[[str], ContextManager]) -> Calibration:
        return calibration.calibrate(preset, store, report=report, slot=slot, **self.plan())

    def summary_lines(self, result: Calibration) -> list[str]:
        return summary_lines(result)
