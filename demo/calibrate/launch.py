"""The calibration a first launch runs: the engine's Calibrator (demo.engine.arena), made here.

`python app.py` hands a LaunchCalibrator to Arena.start_background_warmup; the engine calls
it without importing demo.calibrate, which sits above it. On a CPU class with a profile
(demo.calibrate.profile) it converts only the formats the profile chose and confirms the
profile's baseline against its runner-up; where this machine disagrees, or on a class with
no profile, it measures the formats a launch calibrates (plan.launch_formats) with the
launch plan (calibration.LAUNCH).
"""

from __future__ import annotations

import shlex
import threading
import time
from pathlib import Path
from typing import Callable, ContextManager, Optional

from ..models import formats
from ..core.files import write_atomic
from ..models.calibration_result import Calibration, Origin, split_plain_key
from ..models.sources import has_formats
from . import calibration, profile as profiles
from .plan import launch_formats
from .report import launch_lines

EARLY_POLL_S = 1.0  # how often the early conversion looks for the pair's own IR
CONVERTERS = 2  # early conversions at once: each child mostly uses one core, and these boxes have two


class LaunchCalibrator:
    """demo.engine.arena.Calibrator for a launch: this CPU class's profile, confirmed here, or
    the launch formats and plan measured. `use_profiles` False (app.py --no-profiles) always
    measures; `profiles_dir` is where profiles are looked for (tests plant their own)."""

    def __init__(self, use_profiles: bool = True, profiles_dir: Path = profiles.PROFILES_DIR):
        self.use_profiles, self.profiles_dir = use_profiles, profiles_dir
        self.fallback: Optional[str] = None  # why the profile was set aside, once it was
        self._profiles: dict = {}

    def profile(self, preset, store) -> Optional[dict]:
        """This machine's class profile for `preset`, while it is still trusted (read once)."""
        if not self.use_profiles or self.fallback is not None:
            return None
        if preset.name not in self._profiles:
            self._profiles[preset.name] = profiles.matching(preset, store, self.profiles_dir)
        return self._profiles[preset.name]

    def plan(self, preset=None, store=None) -> dict:
        """The formats and plan of the calibration a launch runs: the profile's formats where
        this class has one, else those for this machine's ISA."""
        from ..core.machine import machine_info

        found = self.profile(preset, store) if preset is not None else None
        if found is not None:
            d = found["decisions"]
            return {"main_formats": d["main_formats"], "draft_formats": d["draft_formats"], "plan": calibration.LAUNCH}
        main, draft = launch_formats(machine_info()["isa_flags"])
        return {"main_formats": main, "draft_formats": draft, "plan": calibration.LAUNCH}

    def convert_early(self, preset, store, report: Callable[[str], None], stop: threading.Event,
                      on_ready: Callable[[str, Path], None] = lambda role, folder: None) -> None:
        """Convert the formats the launch calibrates as soon as each model's own IR is on disk
        (the warm-up calls it at once), each in a child at low priority, beside the pair's load
        and the calibration's own prepare. Two at a time (CONVERTERS), from one line: those a
        profile's confirmation times first, then the main's others, then the draft's: the
        draft's (a quarter of a main's work) lands during the confirmation, a main's would land
        after it and hold Ready back (Zen 4, 2026-12-07: Ready 196 s against 209-222 s with the
        draft second; BENCHMARKS.md). A compressed format is
        made straight from the GGUF IR (its weights unpacked in memory,
        demo.models.formats.unpack_and_compress). `on_ready(role, folder)` hears of each
        format as it lands (the warm-up proves it on this CPU then)."""
        plan = self.plan(preset, store)
        first = self._confirmation_formats(self.profile(preset, store))
        line = ([("main", f) for f in first] + [("main", f) for f in plan["main_formats"] if f not in first]
                + [("draft", f) for f in plan["draft_formats"]])
        specs = {"main": preset.main, "draft": preset.draft}
        jobs = [(role, fmt) for role, fmt in line if fmt != formats.DEFAULT_FORMAT
                and specs[role] is not None and has_formats(specs[role])]
        lock = threading.Lock()

        def worker() -> None:
            while not stop.is_set():
                with lock:
                    if not jobs:
                        return
                    role, fmt = jobs.pop(0)
                while store.ready_path(specs[role], formats.DEFAULT_FORMAT) is None:
                    if stop.wait(EARLY_POLL_S):
                        return
                main, draft = ([fmt], []) if role == "main" else ([], [fmt])
                folders = calibration.prepare_candidates(preset, store, main, draft, report=report, stop=stop)
                on_ready(role, folders[(role, fmt)])

        helpers = [threading.Thread(target=worker, name=f"startup-early-conversion-{i}", daemon=True)
                   for i in range(1, CONVERTERS)]
        for h in helpers:
            h.start()
        worker()
        for h in helpers:
            h.join()

    @staticmethod
    def _confirmation_formats(found: Optional[dict]) -> list[str]:
        if found is None:
            return []
        d = found["decisions"]
        keys = [d["baseline"][profiles.CONFIRM_MODE], d["runner_up"]]
        return list(dict.fromkeys(split_plain_key(k)[0] for k in keys if k))

    def prepare_candidates(self, preset, store, report: Callable[[str], None]) -> None:
        """Convert what the launch measures first: with a profile, only what its confirmation
        times (the rest is converted while it runs, and waited for after); else every format."""
        found = self.profile(preset, store)
        if found is not None:
            calibration.prepare_candidates(preset, store, self._confirmation_formats(found), [], report=report)
            return
        plan = self.plan(preset, store)
        calibration.prepare_candidates(preset, store, plan["main_formats"], plan["draft_formats"], report=report)

    def calibrate(self, preset, store, report: Callable[[str], None],
                  slot: Callable[[str], ContextManager], race_pair: Optional[Callable[..., dict]] = None) -> Calibration:
        found, contradicted = self.profile(preset, store), None
        if found is not None:
            confirmed, contradicted = self._confirm(found, preset, store, report, slot)
            if confirmed is not None:
                plan = self.plan(preset, store)  # the pair's formats, converted early meanwhile: waited for here
                calibration.prepare_candidates(preset, store, plan["main_formats"], plan["draft_formats"],
                                               report=report)
                return confirmed
            self.prepare_candidates(preset, store, report)  # measured as without a profile: every launch format
        result = calibration.calibrate(preset, store, report=report, slot=slot, race_pair=race_pair,
                                       **self.plan(preset, store))
        if contradicted is not None:  # the evidence kept with what replaced the profile
            result = result.model_copy(update={"origin": contradicted})
            write_atomic(Path(result.path), result.model_copy(update={"path": None}).to_json())
        return result

    def _confirm(self, found: dict, preset, store, report: Callable[[str], None],
                 slot: Callable[[str], ContextManager]) -> tuple[Optional[Calibration], Optional[Origin]]:
        """(the profile's calibration saved as this machine's, None) when the confirmation
        agrees; (None, the contradicting confirmation) when it does not, self.fallback saying why."""
        from ..engine.native_guard import SafetyRecord
        from ..models.calibration_store import fingerprint, stages_path
        from .stages import StageRunner

        started = time.time()
        fp = fingerprint(preset, store)
        runner = StageRunner(stages_path(store, preset.name, fp), {"profile": found["file"], "fingerprint": fp},
                             SafetyRecord(store.cache_dir), report, slot=slot)
        origin = profiles.confirm(found, preset, store, report, runner)
        runner.finish()
        if origin.confirmed:
            report(origin.words())
            return profiles.from_profile(found, preset, store, origin, started), None
        slower = sum(r < origin.bar for r in origin.ratios)
        self.fallback = (f"this CPU class's profile ({found['file']}) chose {origin.chosen} over {origin.runner_up}, "
                         f"but here {origin.runner_up} ran over {1 / origin.bar:.2f}× it in {slower} of "
                         f"{len(origin.ratios)} paired samples (median {origin.median_ratio():.2f}×): measuring this "
                         "machine instead")
        report(self.fallback)
        return None, origin

    def summary_lines(self, result: Calibration, cache_dir: Path) -> list[str]:
        lines = launch_lines(result, f"python -m demo.calibrate --cache-dir {shlex.quote(str(cache_dir))}")
        if (result.origin is None or not result.origin.confirmed) and result.path:
            lines.append("  no profile of this CPU class confirmed it: python -m demo.calibrate.profile write "
                         f"{shlex.quote(result.path)} (after copying it into bench-results/) ships one")
        return lines
