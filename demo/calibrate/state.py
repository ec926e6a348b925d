"""One calibration's typed state (demo.calibrate.calibration's steps read and fill it) and its
saved form: what is fixed before measuring (Setup), what the measuring steps found (Found), what
was chosen from it (Chosen), and the Calibration written from the three (`saved`)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from ..core.errors import DemoError
from ..core.machine import others_busy
from ..models.calibration_result import Calibration, split_plain_key
from ..models.calibration_store import CALIBRATION_VERSION
from .measure import MIN_AGREEMENT, PREFIX_TOKENS, sparse_points
from .plan import Plan

Report = Callable[[str], None]


@dataclass
class Setup:
    """What every step of one calibration reads, fixed before its first measurement."""

    preset: object
    store: object
    main_formats: Sequence[str]
    draft_formats: Sequence[str]
    k_max: int
    texts: list
    max_new_tokens: int
    budget: int
    plan: Plan
    threads: dict          # {"fair": None (OpenVINO's default), "race": one pipeline's share}
    folders: dict          # {("main"|"draft", format): prepared folder}
    stages: object         # the StageRunner every measurement runs through (demo.calibrate.stages)
    report: Report
    stop: Optional[threading.Event]
    race_pair: Optional[Callable[..., dict]]

    def check_stop(self) -> None:
        if self.stop is not None and self.stop.is_set():
            raise DemoError("Calibration was stopped; what was measured so far is kept.")

    def no_room(self) -> DemoError:
        from ..core.memory import gb

        return DemoError(f"No format pair of {self.preset.name!r} fits in {gb(self.budget)} of memory; "
                         "free memory or choose a smaller preset.")


@dataclass
class Found:
    """What the measuring steps found, in the order they find it."""

    drafts: dict = field(default_factory=dict)     # usable draft formats: measure_drafts' result each
    mains: dict = field(default_factory=dict)      # main format: measure_main's result (curves, memory)
    runs: dict = field(default_factory=dict)       # (main, draft): how far the draft guesses right in a row
    answered_by: Optional[str] = None              # whose greedy answers acceptance was counted on
    answers: dict = field(default_factory=dict)
    reads: dict = field(default_factory=dict)      # main format: its greedy choices against the original's
    measured_precision: Optional[dict] = None
    precision: Optional[dict] = None               # the activation precision chosen (precision.choose)
    quality: dict = field(default_factory=dict)
    too_far: list = field(default_factory=list)
    usable_mains: dict = field(default_factory=dict)
    plain: dict = field(default_factory=dict)      # mode: the plain pipelines' rates (measure_plain)
    plain_pick: dict = field(default_factory=dict)  # mode: the fastest plain configuration and its ties

    def baseline_of(self, mode: str, main_format: str) -> str:
        """The plain configuration (calibration_result.plain_key) the baseline runs in `mode` beside a
        pair on `main_format`: the pair's own main on paged attention when it ties with the
        fastest without a draft (same weights, same backend on both sides), else the fastest."""
        return main_format if main_format in self.plain_pick[mode]["ties"] else self.plain_pick[mode]["main_format"]


@dataclass
class Chosen:
    """Per mode, the configuration chosen and the real pipelines timed to choose it."""

    candidates: list = field(default_factory=list)
    choice: dict = field(default_factory=dict)
    overheads: dict = field(default_factory=dict)
    timed_pairs: dict = field(default_factory=dict)
    baseline: dict = field(default_factory=dict)


def saved(s: Setup, found: Found, chosen: Chosen, *, started: float, busy_before, fp) -> Calibration:
    """The calibration as it is saved (demo.models.calibration_result)."""
    from ..core.settings import cpu_cores

    fastest = found.plain_pick["fair"]
    return Calibration.model_validate({
        "calibration_version": CALIBRATION_VERSION,
        "preset": s.preset.name,
        "fingerprint": fp,
        "started_at": started,
        "duration_s": round(time.time() - started, 1),
        # Share of the cores other processes used just before and after measuring.
        "others_busy": [None if b is None else round(b, 2) for b in (busy_before, others_busy())],
        "k_max": s.k_max,
        "plan": s.plan.name,
        # Whose greedy answers acceptance was counted on, when not every main format's.
        "acceptance_from": None if s.plan.acceptance_per_main else found.answered_by,
        "prompts": len(s.texts),
        "max_new_tokens": s.max_new_tokens,
        "prefix_tokens": PREFIX_TOKENS,
        "threads": dict(s.threads),
        "race_curve_measured_at": sparse_points(range(1, s.k_max + 2)),  # the other M of race curves are interpolated
        "cores": cpu_cores(),
        "budget_bytes": s.budget,
        "main": found.mains,
        "draft": found.drafts,
        # Per pair "main/draft": how far the draft guesses right in a row from each answer token.
        "agreement_runs": {f"{mf}/{df}": r for (mf, df), r in found.runs.items()},
        # Per mode: the real pipeline's step against the model's, and the overhead per step
        # every candidate's prediction includes.
        "pipeline_overhead": chosen.overheads,
        # Every pair whose real pipeline was timed, per mode (the chosen one among them).
        "pipeline_overheads": chosen.timed_pairs,
        "candidates": chosen.candidates,
        "choice": chosen.choice,
        # Measured, fair threads: the fastest main format alone (kept for older readers).
        "fastest_alone": dict(zip(("main_format", "attention"), split_plain_key(fastest["main_format"])),
                              baseline_tok_s=fastest["baseline_tok_s"]),
        "plain": found.plain,
        "baseline": chosen.baseline,
        "quality": found.quality,
        "min_agreement": MIN_AGREEMENT,
        "precision": found.precision,
        # Configurations that crashed OpenVINO on this machine, skipped (demo.engine.native_guard),
        # and formats too far from the original weights.
        "skipped": s.stages.skipped(list(s.folders.values())) + found.too_far,
    })
