"""A terminal log a Space's log viewer can bear: a task's progress at most once every few
seconds, never the same line twice in a row, and each task's duration when it ends.

A task is a message without its trailing percentage ("converting main model to IR: 42%"
belongs to "converting main model to IR"); a new task ends the one before.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Callable, Optional

_PERCENT = re.compile(r"(?::\s*\d+(?:\.\d+)?%|…)\s*$")


class QuietLog:
    def __init__(self, write: Callable[[str], None], interval_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic):
        self.write, self.interval_s, self.clock = write, interval_s, clock
        self._task: Optional[str] = None
        self._started = self._printed = 0.0
        self._last = ""
        self._lock = threading.Lock()

    def __call__(self, message: str) -> None:
        with self._lock:
            now, task = self.clock(), _PERCENT.sub("", message).strip()
            if task != self._task:
                self._end(now)
                self._task, self._started = task, now
            elif message == self._last or (now - self._printed < self.interval_s and not message.endswith("100%")):
                return
            self._printed, self._last = now, message
            self.write(message)

    def _end(self, now: float) -> None:
        # Only tasks that took a while: "ready" or a one-off sentence needs no duration.
        if self._task is not None and now - self._started >= 1.0:
            self.write(f"{self._task}: done in {now - self._started:.1f} s")
