"""The calibration a first launch runs: the engine's Calibrator (demo.engine.arena), made here.

`python app.py` hands a LaunchCalibrator to Arena.start_background_warmup; the engine calls
it without importing demo.calibrate, which sits above it. It measures the formats a launch
calibrates (launch_formats, below) with the launch plan (calibration.LAUNCH).
"""

from __future__ import annotations

import shlex
import threading
from pathlib import Path
from typing import Callable, ContextManager, Optional, Sequence

from ..models import formats
from ..models.calibration_result import Calibration
from ..models.sources import has_formats
from . import calibration
from .report import launch_lines

EARLY_POLL_S = 1.0  # how often the early conversion looks for the pair's own IR


def launch_formats(isa_flags: Sequence[str]) -> tuple[list[str], list[str]]:
    """(main, draft) formats a first launch calibrates: the GGUF-derived IR it already has and
    the compressed format that won on this CPU class (BENCHMARKS.md): int4_sym where integer
    dot products are fast (VNNI or AMX), f16 where only AVX2 (compressed verify steps cost
    nearly K+1 tokens there, f16 barely more than one). The first main format answers the
    acceptance prompts, so the faster one goes first, and a slower format that cannot beat
    it is not measured further. With fast integer kernels the int4_sym draft is a candidate
    too (AMX Xeon, f32 activations: 18 against 24 ms a guess for the gguf IR).
    With fast integer kernels int4_channel (one int4 scale a row) is measured too, alone only
    (Plan.alone_only: its quality and its rate without a draft, no curve): on a Zen 4 its main
    alone is the fastest plain configuration (1.12x int4_sym's), so the speedup the page reads
    is against it; as a pair's main it bought little there and cost 125 s of Ready to measure
    (BENCHMARKS.md), so `python -m demo.calibrate` measures that."""
    fast_int = any(f in isa_flags for f in ("avx512_vnni", "avx_vnni", "amx_int8"))
    if fast_int:
        return ["int4_sym", "gguf", "int4_channel"], ["int4_sym", "gguf"]
    return ["gguf", "f16"], ["gguf"]


class LaunchCalibrator:
    """demo.engine.arena.Calibrator for a launch: the launch formats and plan."""

    def plan(self) -> dict:
        """The formats and plan of the calibration a launch runs, for this machine's ISA."""
        from ..core.machine import machine_info

        main, draft = launch_formats(machine_info()["isa_flags"])
        return {"main_formats": main, "draft_formats": draft, "plan": calibration.LAUNCH}

    def convert_early(self, preset, store, report: Callable[[str], None], stop: threading.Event) -> None:
        """Convert the formats the launch calibrates as soon as each model's own IR is on disk
        (the warm-up calls it at once), in a child at low priority, beside the pair's load and
        the calibration's own prepare. A compressed format is made straight from the GGUF IR (its weights
        unpacked in memory, demo.models.formats.unpack_and_compress); the main model first,
        the longest."""
        plan = self.plan()
        for role, spec, fmts in (("main", preset.main, plan["main_formats"]),
                                 ("draft", preset.draft, plan["draft_formats"])):
            for fmt in fmts:
                if fmt == formats.DEFAULT_FORMAT or spec is None or not has_formats(spec):
                    continue
                while store.ready_path(spec, formats.DEFAULT_FORMAT) is None:
                    if stop.wait(EARLY_POLL_S):
                        return
                main, draft = ([fmt], []) if role == "main" else ([], [fmt])
                calibration.prepare_candidates(preset, store, main, draft, report=report, stop=stop)

    def prepare_candidates(self, preset, store, report: Callable[[str], None]) -> None:
        plan = self.plan()
        calibration.prepare_candidates(preset, store, plan["main_formats"], plan["draft_formats"], report=report)

    def calibrate(self, preset, store, report: Callable[[str], None],
                  slot: Callable[[str], ContextManager], race_pair: Optional[Callable[..., dict]] = None) -> Calibration:
        return calibration.calibrate(preset, store, report=report, slot=slot, race_pair=race_pair, **self.plan())

    def summary_lines(self, result: Calibration, cache_dir: Path) -> list[str]:
        return launch_lines(result, f"python -m demo.calibrate --cache-dir {shlex.quote(str(cache_dir))}")
