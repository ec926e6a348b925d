"""Fan-in of the two sides' streams: what the Race deployment does, in plain asyncio.

Each side streams from its own replica (maybe on another machine). The merge is the
cluster's version of demo.engine.race.race(): one stream, both sides' events interleaved as they
arrive, a slow side never stalling the fast one. On top of that:

* A side's events are held back until the other side has started too (or refused), so a
  request that one side refuses (prompt too long, models not loadable) ends with one
  Refusal and no half-shown race, as Arena.run checks both sides before either starts.
* A side whose stream breaks (its replica died, its node went away) ends with a failed
  DoneEvent carrying what it delivered; the other side goes on, as in one process.
* Leaving the merge early (the caller cancelled: Stop, tab closed) cancels every side's
  stream, which reaches the side's replica as a cancellation and there stops generate().

A "stream" is anything with `async for` and `cancel()`: Ray Serve's
DeploymentResponseGenerator, or a test double.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import aclosing
from typing import AsyncIterator, Callable, Optional, Protocol

from ..core.errors import unexpected
from ..core.streaming import SIDES, ChunkEvent, DoneEvent, StartEvent, StatusEvent
from .protocol import Refusal

# With no event at all for this long, the sides' replicas are all busy (the request waits
# in Ray's queue for one): say so once.
WAITING_NOTE_S = 1.0
WAITING_NOTE = "waiting for a free pipeline on the cluster"


class Stream(Protocol):
    def __aiter__(self) -> AsyncIterator: ...

    def cancel(self) -> None: ...


class _End:
    def __init__(self, side: str, error: Optional[str] = None):
        self.side, self.error = side, error


def _broken(side: str, seen: dict, message: str) -> DoneEvent:
    """A failed result for a side whose stream broke, on that side's own clock."""
    from ..core.streaming import RunResult  # a plain dataclass; nothing of OpenVINO is loaded

    start = seen.get("start")
    chunks = seen.get("chunks", [])
    if start is None:
        start = time.perf_counter()
    end = chunks[-1].t if chunks else start
    return DoneEvent(side, RunResult(side, start=start, end=end, chunks=list(chunks),
                                     error=f"the {side} pipeline's stream broke ({message})"))


async def merge_sides(streams: dict, waiting_note_s: float = WAITING_NOTE_S) -> AsyncIterator:
    """Run the given sides' streams at once and yield their events as they arrive."""
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(side: str, stream: Stream) -> None:
        error = None
        try:
            async for event in stream:
                queue.put_nowait(event)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the replica died, the node left, a bug on the other side
            error = unexpected(f"the {side} replica's stream", e)  # its text and name to the log only
        queue.put_nowait(_End(side, error))

    tasks = [asyncio.ensure_future(pump(side, stream)) for side, stream in streams.items()]
    pending = set(streams)       # sides whose stream has not ended
    finished: set = set()        # sides whose DoneEvent went out
    resolved: set = set()        # sides that started (or ended): the hold is lifted once all did
    held: list = []
    seen: dict = {side: {"chunks": []} for side in streams}
    noted = False
    try:
        while pending:
            try:
                if noted or resolved:
                    event = await queue.get()
                else:
                    event = await asyncio.wait_for(queue.get(), waiting_note_s)
            except asyncio.TimeoutError:
                noted = True
                yield StatusEvent(WAITING_NOTE)
                continue
            if isinstance(event, _End):
                pending.discard(event.side)
                if event.side in finished:
                    continue
                # Ended without a result: broken (or a replica that returned early).
                event = _broken(event.side, seen[event.side], event.error or "it ended without a result")
            if isinstance(event, Refusal):
                yield event
                return  # the finally below cancels the other side
            if isinstance(event, StatusEvent):
                yield event
                continue
            side = event.side
            if isinstance(event, StartEvent):
                seen[side]["start"] = event.t
            elif isinstance(event, ChunkEvent):
                seen[side]["chunks"].append(event.chunk)
            elif isinstance(event, DoneEvent):
                finished.add(side)
            resolved.add(side)
            if len(resolved) < len(streams):
                held.append(event)
                continue
            for h in held:
                yield h
            held.clear()
            yield event
        for h in held:  # only when a side ended with nothing at all (already reported)
            yield h
    finally:
        for side, stream in streams.items():
            if side in pending:
                stream.cancel()
        for task in tasks:
            task.cancel()


async def race_streams(open_side: Callable[[str], Stream], mode: str,
                       waiting_note_s: float = WAITING_NOTE_S) -> AsyncIterator:
    """The race ("race": both sides at once) or the fair measurement ("fair": baseline
    alone, then speculative alone), as one stream of events."""
    # aclosing: leaving early (Stop, a Refusal) must run the merge's cleanup now, which
    # cancels the sides' streams, not whenever the garbage collector gets to it.
    groups = [SIDES] if mode == "race" else [(side,) for side in SIDES]  # fair: one side after the other
    for group in groups:
        async with aclosing(merge_sides({side: open_side(side) for side in group}, waiting_note_s)) as events:
            async for event in events:
                yield event
                if isinstance(event, Refusal):
                    return
