"""A terminal log a Space's log viewer can bear: a task's progress at most once every few
seconds, never the same line twice, and how long each task took.

A task is a message without its trailing percentage ("converting main model to IR: 42%"
belongs to "converting main model to IR"). Two tasks may report at once (the draft is
prepared beside the main model): each is rate-limited on its own, a duration is measured
within its stream (the thread that reports it, and a one-word prefix such as "calibrating: "),
not across streams (a conversion is not "done" because a check began in another thread), and two tasks that take
turns (one waiting on the other's prepare) never reprint their lines: an identical line
comes back only as a new occurrence of its step, at least `repeat_s` later, and not while its
stream still has it open (a conversion's last word repeating its first). A task with percentages
says its duration with its 100% line; one without says it when the next new task begins,
unless it is a wait. An indented line (a summary's) is written as it comes.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Callable, Optional

# A wait is not a step: nothing says when it ends (the pair it waited for may already be
# loaded), so the next step of its stream, minutes later, would time it wrongly.
WAIT = "waiting for "
_PROGRESS = re.compile(r"(?::\s*\d+(?:\.\d+)?%|…)\s*$")


class QuietLog:
    def __init__(self, write: Callable[[str], None], interval_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic, repeat_s: float = 30.0):
        self.write, self.interval_s, self.clock, self.repeat_s = write, interval_s, clock, repeat_s
        self._tasks: dict[str, dict] = {}   # task -> started, printed (time), last (message)
        self._open: dict[tuple, str] = {}   # stream -> its latest task without percentages, not yet timed
        self._latest: Optional[str] = None  # the task of the message before
        self._lock = threading.Lock()

    def __call__(self, message: str) -> None:
        with self._lock:
            if message.startswith(" "):  # an indented line belongs to a summary: no task, no duration
                self.write(message)
                return
            now, task = self.clock(), _PROGRESS.sub("", message).strip()
            stream, progress = _stream(task), message.rstrip().endswith("%")
            state = self._tasks.get(task)
            if (state is not None and task != self._latest and state["last"] == message and not progress
                    and now - state["printed"] >= self.repeat_s and self._open.get(stream) != task):
                state = None  # the same step again later (a reload after calibration): a new occurrence
            self._latest = task
            if state is None:
                self._close(now, stream)
                self._tasks[task] = {"started": now, "printed": now, "last": message}
                if not progress and not task.startswith(WAIT):
                    self._open[stream] = task
                self.write(message)
                return
            finished = message.rstrip().endswith("100%")
            if progress:  # its 100% line will say how long it took; no second duration (from any thread)
                for key in [k for k, t in self._open.items() if t == task]:
                    del self._open[key]
            if message == state["last"] or (now - state["printed"] < self.interval_s and not finished):
                return
            state.update(printed=now, last=message)
            self.write(f"{message} ({now - state['started']:.1f} s)" if finished else message)

    def _close(self, now: float, stream: str) -> None:
        task = self._open.pop(stream, None)
        if task is not None:
            started = self._tasks[task]["started"]
            if now - started >= 1.0:  # a one-off sentence needs no duration
                self.write(f"{task}: done in {now - started:.1f} s")


def _stream(task: str) -> tuple[str, int]:
    """ "calibrating: measuring …" belongs to the stream "calibrating"; a plain step, or a
    sentence such as "fastest main alone: …", to "": each within the thread reporting it, whose
    steps follow one another (tasks of other threads run beside them)."""
    head, sep, _ = task.partition(": ")
    return (head if sep and " " not in head else ""), threading.get_ident()
