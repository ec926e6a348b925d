"""Test doubles with the same interface as demo.engine.openvino_runner.OpenVINORunner.

FakeRunner replays canned chunks, so merging, stopping and replay logic can be tested fast
and deterministically without OpenVINO. Its pace is set by `step(i)`, called before chunk
i: a sleep by default, or a hook that waits for the other side, so that a test can make an
ordering certain instead of hoping a sleep was long enough.

RecordingRunner wraps a REAL runner and only records what it delivered (a spy, not a fake).
"""

import threading
import time
from typing import Callable, Optional

from demo.core.streaming import SPECULATIVE, Chunk, RunResult


class FakeRunner:
    def __init__(self, side, chunk_sizes, delay_s=0.01, fail_with=None, first_token=1,
                 step: Optional[Callable[[int], None]] = None, watch: Optional[threading.Event] = None):
        self.side = side
        self.chunk_sizes = chunk_sizes
        self.delay_s = delay_s
        self.fail_with = fail_with
        self.first_token = first_token
        self.step = step or (lambda i: time.sleep(self.delay_s))
        self.watch = watch          # a stop flag: chunks delivered while it is set are counted
        self.calls = 0
        self.delivered = 0          # chunks handed to on_chunk
        self.after_stop = 0         # of which while `watch` was already set
        self.finished = threading.Event()  # set when run() returns, however it ends

    def run(self, prompt, settings, on_chunk, on_start=lambda t: None, stop=None):
        self.calls += 1
        try:
            return self._run(on_chunk, on_start)
        finally:
            self.finished.set()

    def _run(self, on_chunk, on_start):
        result = RunResult(self.side, start=time.perf_counter(), end=0.0)
        on_start(result.start)
        if self.fail_with is not None:
            raise self.fail_with
        token = self.first_token
        for i, size in enumerate(self.chunk_sizes):
            self.step(i)
            ids = tuple(range(token, token + size))
            token += size
            text = "".join(f"t{n} " for n in ids)
            accepted = "".join(f"t{n} " for n in ids[:-1]) if self.side == SPECULATIVE else ""
            chunk = Chunk(self.side, ids, text, accepted, time.perf_counter())
            result.chunks.append(chunk)
            if self.watch is not None and self.watch.is_set():
                self.after_stop += 1
            self.delivered += 1
            if not on_chunk(chunk):
                result.cancelled = True
                break
        result.end = time.perf_counter()
        return result


class RecordingRunner:
    """A real runner, unchanged, that also records every run and the chunks it delivered
    after `watch` (a stop flag) was set, counted where they are delivered: in the worker."""

    def __init__(self, inner, watch: Optional[threading.Event] = None, log: Optional[list] = None):
        self.inner = inner
        self.side = inner.side
        self.watch = watch
        self.log = log if log is not None else []  # (side, prompt, settings, RunResult) per run
        self.after_stop: list = []  # chunks delivered while `watch` was set, in the last run

    def __getattr__(self, name):  # tokenizer, template, ...: the real runner's
        return getattr(self.inner, name)

    def run(self, prompt, settings, on_chunk, on_start=lambda t: None, stop=None):
        self.after_stop = []

        def counted(chunk):
            if self.watch is not None and self.watch.is_set():
                self.after_stop.append(chunk)
            return on_chunk(chunk)

        result = self.inner.run(prompt, settings, counted, on_start)
        self.log.append((self.side, prompt, settings, result))
        return result


class ProvenGuard:
    """A NativeGuard stand-in whose record says every configuration runs on this CPU (for
    tests of other things that go through the guard, with model folders that do not exist)."""

    def __init__(self):
        self.checked: list = []
        self.record = self  # the page reads record.crashes()

    def crashes(self, folders=None) -> dict:
        return {}

    def check_all(self, configs, status=lambda m: None, cancel=None) -> None:
        self.checked.extend(configs)

    def why_not(self, config):
        return None

    def require(self, configs, status=lambda m: None, cancel=None) -> None:
        self.check_all(configs, status, cancel)
