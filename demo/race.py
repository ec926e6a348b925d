"""Run the baseline and speculative sides and merge their chunks into one stream.

Pure logic over anything with the Runner interface, so it is tested with fake runners.

* race: both sides at once, one thread each, chunks merged as they arrive through one
  queue, so a slow side never stalls the fast one.
* fair: each side alone with the whole machine, one after the other; the recorded chunks
  (with their timestamps) can then be replayed side by side at their real pace.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Protocol, Union

from .errors import DemoError
from .settings import GenerationSettings
from .streaming import SIDES, Chunk


class Runner(Protocol):
    side: str

    def run(self, prompt: str, settings: GenerationSettings, on_chunk: Callable[[Chunk], bool]): ...


@dataclass(frozen=True)
class StartEvent:
    """A side called generate() at time `t` (perf_counter): its clock starts here."""

    side: str
    t: float


@dataclass(frozen=True)
class ChunkEvent:
    side: str
    chunk: Chunk
    phase: str = "live"  # "live" while generating, "replay" when replaying a fair run


@dataclass(frozen=True)
class DoneEvent:
    side: str
    result: object  # pipelines.RunResult (or a test double with the same fields)


Event = Union[StartEvent, ChunkEvent, DoneEvent]

# Max time to wait for a side's thread after Stop; generate() returns within one step
# of the streamer answering CANCEL.
JOIN_TIMEOUT_S = 30.0


def _run_side(runner: Runner, prompt: str, settings: GenerationSettings, stop: threading.Event,
              emit: Callable[[Event], None], phase: str = "live") -> None:
    """Run one side to the end, turning every failure into a reported result."""

    def on_chunk(chunk: Chunk) -> bool:
        emit(ChunkEvent(runner.side, chunk, phase))
        return not stop.is_set()

    start = time.perf_counter()
    emit(StartEvent(runner.side, start))
    try:
        result = runner.run(prompt, settings, on_chunk)
    except DemoError as e:
        result = _failed(runner.side, start, str(e))
    except Exception as e:  # a bug or an OpenVINO failure on this side must not hang the other
        result = _failed(runner.side, start, f"{type(e).__name__}: {e}")
    if stop.is_set():
        result.cancelled = True
    emit(DoneEvent(runner.side, result))


def _failed(side: str, start: float, message: str):
    from .pipelines import RunResult  # local import: RunResult is a plain dataclass

    return RunResult(side, start=start, end=time.perf_counter(), error=message)


def race(runners: dict, prompt: str, settings: GenerationSettings,
         stop: Optional[threading.Event] = None) -> Iterator[Event]:
    """Both sides at once. Closing the iterator (or setting `stop`) cancels both."""
    stop = stop or threading.Event()
    events: "queue.Queue[Event]" = queue.Queue()
    threads = [
        threading.Thread(target=_run_side, args=(runners[s], prompt, settings, stop, events.put),
                         name=f"race-{s}", daemon=True)
        for s in SIDES
    ]
    for t in threads:
        t.start()
    pending = set(SIDES)
    try:
        while pending:
            event = events.get()
            if isinstance(event, DoneEvent):
                pending.discard(event.side)
            yield event
    finally:
        # Runs on normal end, on Stop, and when the consumer goes away (tab closed).
        if pending:
            stop.set()
        for t in threads:
            t.join(JOIN_TIMEOUT_S)


def sequential(runners: dict, prompt: str, settings: GenerationSettings,
               stop: Optional[threading.Event] = None) -> Iterator[Event]:
    """Baseline alone, then speculative alone: the fair measurement."""
    stop = stop or threading.Event()
    for side in SIDES:
        if stop.is_set():
            break
        # A worker thread, so that this generator can yield while the side generates.
        box: "queue.Queue[Event]" = queue.Queue()
        worker = threading.Thread(target=_run_side, args=(runners[side], prompt, settings, stop, box.put),
                                  name=f"fair-{side}", daemon=True)
        worker.start()
        try:
            while True:
                event = box.get()
                yield event
                if isinstance(event, DoneEvent):
                    break
        finally:
            if worker.is_alive():
                stop.set()
            worker.join(JOIN_TIMEOUT_S)


def replay(results: dict, speed: float = 1.0, stop: Optional[threading.Event] = None,
           sleep: Callable[[float], None] = time.sleep) -> Iterator[ChunkEvent]:
    """Replay recorded runs side by side: each chunk at its offset from its own side's start.

    This turns a fair (sequential) measurement back into a race a visitor can watch, at the
    pace each pipeline really had when it ran alone.
    """
    timeline = sorted(
        ((c.t - r.start, s, c) for s, r in results.items() for c in r.chunks),
        key=lambda x: x[0],
    )
    t0 = time.perf_counter()
    for offset, side, chunk in timeline:
        if stop is not None and stop.is_set():
            return
        wait = offset / speed - (time.perf_counter() - t0)
        if wait > 0:
            sleep(wait)
        yield ChunkEvent(side, chunk, phase="replay")
