"""One side's pipeline in a cluster replica: load once, stream one run, stop on cancel.

A replica of the Baseline or the Speculative deployment holds a SideWorker. Ray Serve
calls `run(request)` and streams what it yields; with `max_ongoing_requests=1` the
replica runs one at a time and a second race waits in Ray's queue (or gets a new replica
from the autoscaler); with more (serve.yaml's batch_requests), the runs that arrive
together share one continuous-batching pipeline (demo.engine.batched_runner).

Stop: when the caller goes away (Stop on the page, tab closed, the race cancelled), Ray
cancels the request, which raises CancelledError in `run` at its next await. The stop flag
is set there; a replica running one request at a time runs its side in a child process
(demo.engine.child_side, as `python app.py` does), which ends within a step while decoding
and is killed within its grace while still reading a prompt, so the CPU is free about when
Ray counts the replica free. A run routed to it meanwhile waits on the runner's lock, and
its clock starts only when its own generate() begins, so it never counts the end of this one.
(A batching replica's shared pipeline stays in process: its Stop lands at the next step.)

No Ray here: the deployment (demo.serve.deployments) passes in how to load a runner and
where it runs, so this is tested with a fake runner.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from typing import Callable, Optional

from ..core.errors import DemoError, unexpected
from ..core.streaming import ChunkEvent, DoneEvent, StatusEvent
from ..engine.arena import RaceRequest, validate_prompt
from ..engine.race import run_side
from .protocol import Refusal

JOURNAL_SIZE = 20


class SideWorker:
    """`load(request, status)` returns a Runner for this side (cached by the caller);
    `ran_on` says where this replica runs, in words."""

    def __init__(self, side: str, load: Callable, ran_on: str, journal_size: int = JOURNAL_SIZE):
        self.side = side
        self._load = load
        self.ran_on = ran_on
        self._journal: deque = deque(maxlen=journal_size)

    async def run(self, request: RaceRequest):
        """Stream one run's events: StatusEvents while loading, then StartEvent, ChunkEvents
        and a DoneEvent (whose result says where it ran), or one Refusal."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        stop = threading.Event()
        end = object()
        # No prompt text: a visitor's prompt is kept only where the operator asked (--keep-prompts).
        entry = {"side": self.side, "prompt_chars": len(request.prompt or ""),
                 "max_new_tokens": request.settings.max_new_tokens, "ran_on": self.ran_on, "chunks": [],
                 "stop_at": None, "cancelled": None, "error": None, "done_at": None}
        self._journal.append(entry)

        def put(event) -> None:  # from the worker thread
            if isinstance(event, ChunkEvent):
                entry["chunks"].append(time.time())  # wall clock: comparable across processes
            elif isinstance(event, DoneEvent):
                event.result.ran_on = self.ran_on
                entry["cancelled"], entry["error"] = event.result.cancelled, event.result.error
            deliver(event)

        def deliver(item) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the replica's loop is gone (shutting down): nobody reads any more
                pass

        def work() -> None:
            try:
                prompt = validate_prompt(request.prompt)
                settings = request.settings.validated()
                runner = self._load(request, lambda m: put(StatusEvent(f"{self.side}: {m}")))
                check = getattr(runner, "check_prompt", None)
                if check is not None:
                    check(prompt, settings)
            except DemoError as e:
                entry["error"] = str(e)
                put(Refusal(self.side, str(e)))
                return
            except Exception as e:  # a bug or an OpenVINO failure while loading: this side fails
                entry["error"] = f"{type(e).__name__}: {e}"  # the replica's own journal, for the operator
                put(Refusal(self.side, f"The {self.side} pipeline could not be loaded: "
                                       f"{unexpected(f'loading the {self.side} pipeline', e)}."))
                return
            if stop.is_set():
                return
            run_side(runner, prompt, settings, stop, put)

        def body() -> None:
            try:
                work()
            finally:
                entry["done_at"] = time.time()
                deliver(end)

        threading.Thread(target=body, name=f"serve-{self.side}", daemon=True).start()
        try:
            while (event := await queue.get()) is not end:
                yield event
        finally:
            if entry["done_at"] is None:
                stop.set()  # cancelled (or closed early): the streamer returns CANCEL next step
                entry["stop_at"] = time.time()

    def recent_runs(self) -> list:
        """The last runs of this replica, newest last: wall-clock times (time.time()) of each
        delivered step, when the stop flag was set and when the run ended."""
        return [dict(e, chunks=list(e["chunks"])) for e in self._journal]


class SideCache:
    """A replica's loaded runners for its side, in the single-machine app's cache
    (demo.engine.pipelines.PipelineCache): budgeted in bytes, each entry one side, sized as
    measured when it loaded (KV pools included), least recently used first out, and one
    that cannot fit even alone refused with a sentence rather than killed for memory.

    The baseline's key leaves out the draft and the method (the main model alone is the
    same pipeline for both), so switching to prompt lookup reloads only the speculative side.
    """

    def __init__(self, side: str, budget: Optional[int] = None, max_runners: Optional[int] = None,
                 side_builder: Optional[Callable] = None, guard=None):
        from ..engine.pipelines import PipelineCache

        self.side = side
        # side_builder: how a runner is built (default one LLMPipeline; a batching replica's: batched_runner).
        # `guard` (a NativeGuard): each model × thread count is proven in a child before the replica
        # compiles it (1 thread per side on 2 cores crashes some CPUs). budget None: this machine's.
        self.pipelines = PipelineCache(budget=budget, max_pairs=max_runners, side_builder=side_builder, guard=guard)

    def get(self, key, status: Callable[[str], None] = lambda m: None):
        return self.pipelines.get_side(key, self.side, status)

    def __len__(self) -> int:
        return len(self.pipelines.loaded())


def side_key(side: str, main, draft, method: str, options):
    """The cache key of one side's pipeline (see SideCache)."""
    from ..core.streaming import BASELINE
    from ..engine.pipelines import PairKey

    if side == BASELINE:
        return PairKey(str(main), None, "draft", options)  # as build_pair's baseline: no draft attached
    return PairKey(str(main), str(draft) if method == "draft" and draft is not None else None, method, options)
