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
from typing import Callable, Iterator, Optional, Protocol, Union

from ..core.errors import DemoError, unexpected
from ..core.settings import GenerationSettings
from ..core.streaming import HEARTBEAT, SIDES, Chunk, ChunkEvent, DoneEvent, Event, Heartbeat, RunResult, StartEvent


class Runner(Protocol):
    side: str

    def run(self, prompt: str, settings: GenerationSettings, on_chunk: Callable[[Chunk], bool],
            on_start: Callable[[float], None] = ..., stop: Optional[threading.Event] = None):
        """Generate, calling on_start(perf_counter) once generation really begins (after any
        wait for the pipeline) and on_chunk for every step; return a RunResult. A runner that
        can end a run between two steps' tokens (a prefill: child_side.ChildSide) watches
        `stop`; the others stop when on_chunk returns False."""


def run_side(runner: Runner, prompt: str, settings: GenerationSettings, stop: threading.Event,
             emit: Callable[[Event], None], phase: str = "live") -> None:
    """Run one side to the end in the calling thread, as events: emit(StartEvent) when its
    generate() really begins, emit(ChunkEvent) for every step (tagged `phase`), then exactly
    one emit(DoneEvent) whose result carries any failure as a sentence (DemoError's own,
    else unexpected()'s), never an exception. Setting `stop` ends the run within a step and
    marks the result cancelled. The race, the three-way lanes and a Serve replica's
    SideWorker all run a side through this."""
    started: list[float] = []

    def on_start(t: float) -> None:
        # The side's clock starts when generate() really starts, not when this thread did:
        # time spent waiting for a pipeline that a stopped run still holds is not counted.
        started.append(t)
        emit(StartEvent(runner.side, t))

    def on_chunk(chunk: Chunk) -> bool:
        emit(ChunkEvent(runner.side, chunk, phase))
        return not stop.is_set()

    try:
        if stop.is_set():  # stopped before it began (while its pipeline loaded): no prefill for nobody
            now = time.perf_counter()
            result = RunResult(runner.side, start=now, end=now)
        else:
            result = runner.run(prompt, settings, on_chunk, on_start, stop=stop)
    except DemoError as e:
        result = _failed(runner.side, started, str(e))
    except Exception as e:  # a bug or an OpenVINO failure on this side must not hang the other
        result = _failed(runner.side, started, unexpected(f"the {runner.side} side", e))
    if stop.is_set():
        result.cancelled = True
    emit(DoneEvent(runner.side, result))


def load_failure(what: str, e: BaseException) -> str:
    """The words a visitor sees when loading `what` raised something other than DemoError."""
    if isinstance(e, MemoryError):
        return f"there was not enough memory to load {what}; choose a smaller preset or weight format"
    return unexpected(f"loading {what}", e)


def _failed(side: str, started: list, message: str):
    now = time.perf_counter()
    return RunResult(side, start=started[0] if started else now, end=now, error=message)


class _Workers:
    """Worker threads that end by themselves; `on_finished` runs once, after the last one.

    Nobody ever joins them: closing a stream (Stop, tab closed) happens on the web server's
    event loop, and waiting there for one or two model steps would freeze every visitor.
    The engine learns that the CPU is free again from `on_finished` instead.
    """

    def __init__(self, on_finished: Optional[Callable[[], None]]):
        self._on_finished = on_finished
        self._left = 0
        self._lock = threading.Lock()

    def start(self, name: str, target: Callable[[], None]) -> None:
        with self._lock:
            self._left += 1

        def body():
            try:
                target()
            finally:
                with self._lock:
                    self._left -= 1
                    last = self._left == 0
                if last and self._on_finished is not None:
                    self._on_finished()

        threading.Thread(target=body, name=name, daemon=True).start()


def _next(events: "queue.Queue", heartbeat_s: Optional[float]):
    """The next event, or HEARTBEAT once `heartbeat_s` passes without one (None: wait for it)."""
    try:
        return events.get(timeout=heartbeat_s)
    except queue.Empty:
        return HEARTBEAT


def race(runners: dict, prompt, settings: GenerationSettings,
         stop: Optional[threading.Event] = None,
         on_finished: Optional[Callable[[], None]] = None,
         heartbeat_s: Optional[float] = None) -> Iterator[Event]:
    """Both sides at once. Closing the iterator (or setting `stop`) cancels both. `prompt` is
    one for both, or {side: prompt} (a chat turn: each side has its own history).

    `on_finished` is called (from a worker thread) once both sides have returned, also when
    the iterator was closed early; closing itself never waits. With `heartbeat_s`, HEARTBEAT is
    yielded whenever that long passes without an event (core.streaming.Heartbeat).
    """
    stop = stop or threading.Event()
    events: "queue.Queue[Event]" = queue.Queue()
    workers = _Workers(on_finished)
    for s in SIDES:
        mine = prompt[s] if isinstance(prompt, dict) else prompt
        workers.start(f"race-{s}", lambda r=runners[s], p=mine: run_side(r, p, settings, stop, events.put))
    pending = set(SIDES)
    try:
        while pending:
            event = _next(events, heartbeat_s)
            if isinstance(event, DoneEvent):
                pending.discard(event.side)
            yield event
    finally:
        # Runs on normal end, on Stop, and when the consumer goes away (tab closed).
        if pending:
            stop.set()


_END = object()  # a worker's last item


def _drain(events: "queue.Queue", stop: threading.Event, heartbeat_s: Optional[float] = None) -> Iterator[Event]:
    """Yield a worker's events until its _END (and HEARTBEATs, as race()); a consumer that
    leaves early stops the worker."""
    finished = False
    try:
        while (event := _next(events, heartbeat_s)) is not _END:
            yield event
        finished = True
    finally:
        if not finished:
            stop.set()


def fair(runners: dict, prompt: str, settings: GenerationSettings,
               stop: Optional[threading.Event] = None,
               on_finished: Optional[Callable[[], None]] = None,
               on_status: Callable[[str], object] = lambda message: None,
               heartbeat_s: Optional[float] = None) -> Iterator[Event]:
    """Each side alone, one after the other: the fair measurement. `on_finished` and `heartbeat_s` as in race().

    A runner with a `load(status)` method (pipelines.SideInTurn: a pair that fits in
    memory only one side at a time) is loaded just before its side runs, once the side
    before it is done; `on_status` as in one_by_one(). The baseline goes first, unless
    only the speculative side is in memory: then it does, and a run loads one side, not two.
    """
    def loaded(side: str) -> bool:
        return getattr(runners[side], "is_loaded", lambda: True)()

    def lane(side: str):
        runner = runners[side]
        return side, getattr(runner, "load", lambda status: runner), settings

    order = sorted(SIDES, key=lambda side: not loaded(side))  # stable: baseline first if both are
    return one_by_one([lane(side) for side in order], prompt, stop, on_finished, on_status, heartbeat_s)


class _Lane:
    """A runner under a lane's name: its events say "draft" or "lookup" while its chunks
    keep the runner's own side (a speculative runner's steps still count accepted tokens)."""

    def __init__(self, name: str, runner: Runner):
        self.side = name
        self._runner = runner

    def run(self, prompt, settings, on_chunk, on_start=lambda t: None, stop=None):
        return self._runner.run(prompt, settings, on_chunk, on_start, stop=stop)


def one_by_one(lanes: list, prompt: str, stop: Optional[threading.Event] = None,
               on_finished: Optional[Callable[[], None]] = None,
               on_status: Callable[[str], object] = lambda message: None,
               heartbeat_s: Optional[float] = None) -> Iterator[Event]:
    """Run several lanes alone, one after the other, each with the whole machine: the
    three-way race (baseline, draft model, prompt lookup), measured like fair mode.

    `lanes` is a list of (name, get_runner, settings): `get_runner(status)` is called in
    the worker just before the lane runs, so a lane's pipelines are loaded only once the
    lane before it is done (and memory it no longer needs can be given back). A lane that
    cannot be loaded (DemoError) ends with that error and the next lane still runs.
    `on_status(message)` turns a loading message into an event for the stream (or None to
    drop it). Events carry the lane's name as `side`; `on_finished` and `heartbeat_s` as in
    race(): with heartbeats, a Stop reaches a lane whose pipelines are still loading.
    """
    stop = stop or threading.Event()
    events: "queue.Queue" = queue.Queue()

    def status(message: str) -> None:
        event = on_status(message)
        if event is not None:
            events.put(event)

    def all_lanes() -> None:
        try:
            for name, get_runner, settings in lanes:
                if stop.is_set():
                    break
                try:
                    runner = get_runner(status)
                except DemoError as e:
                    events.put(DoneEvent(name, _failed(name, [], str(e))))
                    continue
                except Exception as e:  # MemoryError from std::bad_alloc, OSError...: this lane fails, not the stream
                    events.put(DoneEvent(name, _failed(name, [], load_failure(f"the {name} lane", e))))
                    continue
                run_side(_Lane(name, runner), prompt, settings, stop, events.put)
                del runner  # the next lane may evict this one's pipelines: hold no reference
        finally:
            events.put(_END)  # whatever happened above, the stream ends and its consumer lets go

    _Workers(on_finished).start("three-way", all_lanes)
    yield from _drain(events, stop, heartbeat_s)


# A replay sleeps in slices this long, so a Stop (or a closed tab) is seen within one, even
# when a recording waits minutes between two steps.
REPLAY_SLICE_S = 0.1


def replay(results: dict, speed: float = 1.0, stop: Optional[threading.Event] = None,
           sleep: Callable[[float], None] = time.sleep,
           clock: Callable[[], float] = time.perf_counter,
           heartbeats: bool = False) -> Iterator[Union[ChunkEvent, Heartbeat]]:
    """Replay recorded runs side by side: each chunk at its offset from its own side's start.

    This turns a fair measurement back into a race a visitor can watch, at the
    pace each pipeline really had when it ran alone. It waits in slices of REPLAY_SLICE_S
    that look at `stop`; with `heartbeats`, it also yields HEARTBEAT after each slice, so a
    consumer that can only be closed between two yields (a web handler) can be stopped
    while it waits. Closing it early sets `stop`. `sleep` and `clock` go together (tests
    pass a fake clock whose sleep advances it).
    """
    timeline = sorted(
        ((c.t - r.start, s, c) for s, r in results.items() for c in r.chunks),
        key=lambda x: x[0],
    )
    finished = False
    t0 = clock()
    try:
        for offset, side, chunk in timeline:
            while True:
                if stop is not None and stop.is_set():
                    return
                wait = offset / speed - (clock() - t0)
                if wait <= REPLAY_SLICE_S:
                    if wait > 0:
                        sleep(wait)  # the last slice: on to the chunk (a re-check could loop on rounding)
                    break
                sleep(REPLAY_SLICE_S)
                if heartbeats:
                    yield HEARTBEAT
            yield ChunkEvent(side, chunk, phase="replay")
        finished = True
    finally:
        if not finished and stop is not None:
            stop.set()  # the consumer left: whoever else waits on this flag stops too
