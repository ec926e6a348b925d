"""The calibration a first launch runs: the engine's Calibrator (demo.engine.arena), made here.

`python app.py` hands a LaunchCalibrator to Arena.start_background_warmup; the engine calls
it without importing demo.calibrate, which sits above it. It measures the formats a launch
calibrates (calibration.launch_formats) with the launch plan (calibration.LAUNCH).
"""

from __future__ import annotations

from typing import Callable, ContextManager

from . import calibration
from .report import summary_lines


class LaunchCalibrator:
    """demo.engine.arena.Calibrator for a launch: the launch formats and plan."""

    def plan(self) -> dict:
        """The formats and plan of the calibration a launch runs, for this machine's ISA."""
        from ..core.machine import machine_info

        main, draft = calibration.launch_formats(machine_info()["isa_flags"])
        return {"main_formats": main, "draft_formats": draft, "plan": calibration.LAUNCH}

    def prepare_candidates(self, preset, store, report: Callable[[str], None]) -> None:
        plan = self.plan()
        calibration.prepare_candidates(preset, store, plan["main_formats"], plan["draft_formats"], report=report)

    def calibrate(self, preset, store, report: Callable[[str], None],
                  slot: Callable[[str], ContextManager]) -> dict:
        return calibration.calibrate(preset, store, report=report, slot=slot, **self.plan())

    def summary_lines(self, result: dict) -> list[str]:
        return summary_lines(result)
