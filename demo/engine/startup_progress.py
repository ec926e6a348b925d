"""How far the launch got, for the page: its current step, the tasks running in it side by
side (the main and the draft model are prepared at once), a fraction where a task reports
one, and the seconds left only where they can be predicted honestly.

One row per task: two tasks that report at once each keep their own row, so no line ever
alternates between them. A task is named by its message without the trailing percentage
or "…" (the convention demo.core.quiet_log reads too); a prepare stage belongs to the row
of its role ("main model", "draft model"), so the next stage of a model replaces its last.

Seconds left come from the task's own measured rate (elapsed time over the fraction done,
once a part of it is done), else from how long the same task took at an earlier launch on
this machine (recorded per CPU fingerprint in the cache folder), else there is no estimate.

Pure engine code: no Gradio.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

_PERCENT = re.compile(r":\s*(\d+(?:\.\d+)?)%\s*$")
_ELLIPSIS = re.compile(r"…\s*$")
WAIT = "waiting for "  # a wait has no duration of its own: never recorded, never predicted
# An extrapolation from too little of a task says nothing: wait for this much of it.
MIN_FRACTION, MIN_ELAPSED_S = 0.05, 2.0
RECORD_FILE = "launch-stages.json"


def task_of(message: str) -> tuple[str, Optional[float]]:
    """("converting main model to IR", 0.42) for "converting main model to IR: 42%"."""
    m = _PERCENT.search(message)
    if m:
        return message[:m.start()].strip(), min(float(m.group(1)) / 100, 1.0)
    return _ELLIPSIS.sub("", message).strip(), None


def _row_of(task: str) -> str:
    for role in ("main model", "draft model"):
        if role in task:
            return role
    return task


@dataclass(frozen=True)
class TaskView:
    label: str                      # what the task does now
    fraction: Optional[float]       # 0..1; None when it reports none
    seconds_left: Optional[float]   # None when it cannot be predicted
    elapsed_s: float


@dataclass(frozen=True)
class StartupView:
    phase: str                      # idle | preparing | ready | failed
    message: str                    # the launch's current step, or the final sentence
    step: Optional[TaskView]        # the current step as a task (None unless preparing)
    tasks: tuple                    # TaskView of the tasks running side by side in this step
    elapsed_s: float                # since the launch began preparing
    warm: bool = False              # the default pair is loaded: races run while the rest goes on


class _Task:
    def __init__(self, label: str, fraction: Optional[float], now: float):
        self.label, self.fraction, self.started = label, fraction, now
        # A step that ran tasks of its own ("preparing the default model pair") takes as long
        # as what was left to do: its duration predicts nothing, so it is never recorded.
        self.umbrella = False
        self.recorded = False


class StartupState:
    """What the app is doing before it can serve its first race (for the page's startup line)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._lock = threading.Lock()
        self._clock = clock
        self.phase = "idle"       # idle | preparing | ready | failed
        self.message = ""
        self._began: Optional[float] = None
        self._step: Optional[_Task] = None
        self._rows: dict[str, _Task] = {}
        self._record_path: Optional[Path] = None
        self._key = ""
        self._recorded: dict[str, float] = {}
        self._warm = False

    def mark_warm(self) -> None:
        """The default pair is loaded: what follows (calibration) no longer keeps races waiting."""
        with self._lock:
            self._warm = True

    def remember_in(self, path: Path, key: str) -> None:
        """Read (and later add to) the durations recorded at earlier launches under `key`
        (this machine and preset) in `path`; an unreadable file only means no estimates."""
        with self._lock:
            self._record_path, self._key = path, key
            try:
                self._recorded = dict(json.loads(path.read_text()).get(key, {}))
            except (OSError, ValueError, AttributeError):
                self._recorded = {}

    def update(self, phase: str, message: str) -> None:
        """The launch's step: a new one ends the step before and the tasks that ran in it."""
        with self._lock:
            now = self._clock()
            if self._began is None and phase == "preparing":
                self._began = now
            label, fraction = task_of(message)
            if phase != "preparing" or self._step is None or self._step.label != label:
                self._finish(self._step, now)
                for row in self._rows.values():
                    self._finish(row, now)
                self._rows.clear()
                self._step = _Task(label, fraction, now) if phase == "preparing" else None
            else:
                self._step.fraction = fraction
            self.phase, self.message = phase, message

    def task(self, message: str) -> None:
        """A task of the current step that runs beside others (a prepare stage of one model)."""
        with self._lock:
            now = self._clock()
            label, fraction = task_of(message)
            row = _row_of(label)
            if self._step is not None:
                self._step.umbrella = True
            current = self._rows.get(row)
            if current is None or current.label != label:
                self._finish(current, now)
                self._rows[row] = _Task(label, fraction, now)
            else:
                current.fraction = fraction
            if fraction is not None and fraction >= 1.0:
                self._finish(self._rows[row], now)

    def get(self) -> tuple[str, str]:
        with self._lock:
            return self.phase, self.message

    def view(self) -> StartupView:
        with self._lock:
            now = self._clock()
            step = self._view(self._step, now) if self.phase == "preparing" and self._step else None
            return StartupView(self.phase, self.message, step, tuple(self._view(r, now) for r in self._rows.values()),
                               0.0 if self._began is None else now - self._began, self._warm)

    # -- estimates --------------------------------------------------------------------------
    def _view(self, task: _Task, now: float) -> TaskView:
        elapsed = now - task.started
        return TaskView(task.label, task.fraction, self._left(task, elapsed), elapsed)

    def _left(self, task: _Task, elapsed: float) -> Optional[float]:
        if task.label.startswith(WAIT):
            return None
        f = task.fraction
        if f is not None and f >= 1.0:
            return 0.0
        if f is not None and f >= MIN_FRACTION and elapsed >= MIN_ELAPSED_S:
            return elapsed * (1 - f) / f
        recorded = None if task.umbrella else self._recorded.get(task.label)
        if recorded is not None and recorded > elapsed:
            return recorded - elapsed
        return None  # running longer than last time, or never timed here: no honest number

    def _finish(self, task: Optional[_Task], now: float) -> None:
        """Record how long a task took, for the next launch's estimates (written at once:
        a launch that dies half-way still teaches the next one)."""
        if task is None or task.label.startswith(WAIT) or task.umbrella or task.recorded:
            return
        task.recorded = True
        self._recorded[task.label] = round(now - task.started, 1)
        if self._record_path is None:
            return
        try:
            try:
                everything = json.loads(self._record_path.read_text())
            except (OSError, ValueError):
                everything = {}
            everything[self._key] = self._recorded
            self._record_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._record_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(everything, indent=1))
            tmp.replace(self._record_path)
        except OSError:  # a read-only cache only costs the next launch its estimates
            pass
