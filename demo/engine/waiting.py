"""Waiting that a visitor can still cancel: a status stream that wakes up while nothing happens.

A web server cancels a streaming handler (Stop, a closed tab) only between two of its
yields: Gradio runs each next() in a worker thread and can close the generator only once
that next() has returned. A job waiting in line that yields only when its place changes
would hold the cancel until the job ahead ends, and then take the slot and run its prefill
for nobody. So the stream yields HEARTBEAT ("still waiting") every HEARTBEAT_S as well; the
caller turns it into an update, and a cancel reaches the job within one heartbeat.

Pure engine code: no Gradio.
"""

from __future__ import annotations

import queue
import threading
from typing import Callable, Iterator, Union

from ..core.streaming import HEARTBEAT, HEARTBEAT_S, Heartbeat


def status_stream(work: Callable[[Callable[[str], None]], object], out: list,
                  on_abandoned: Callable[[object], None] = lambda result: None,
                  heartbeat_s: float = HEARTBEAT_S) -> Iterator[Union[str, Heartbeat]]:
    """Run `work(status)` in a thread; yield each status message as it is reported, and
    HEARTBEAT every `heartbeat_s` while none is.

    The result is appended to `out`; an exception in `work` is re-raised here. If the
    consumer goes away first (Stop, tab closed), nobody waits for the thread: its result
    is handed to `on_abandoned` whenever it arrives, so what it holds is given back.
    """
    q: "queue.Queue" = queue.Queue()
    done = object()
    box: dict = {}
    handoff = threading.Lock()

    def target():
        try:
            result = work(q.put)
        except BaseException as e:  # re-raised in the consumer's thread below
            box["error"] = e
        else:
            with handoff:
                if box.get("abandoned"):
                    on_abandoned(result)
                else:
                    box["result"] = result
        finally:
            q.put(done)

    threading.Thread(target=target, name="arena-load", daemon=True).start()
    taken = False
    try:
        while True:
            try:
                item = q.get(timeout=heartbeat_s)
            except queue.Empty:
                yield HEARTBEAT  # a point where the consumer can be closed
                continue
            if item is done:
                break
            yield item
        if "error" in box:
            raise box["error"]
        out.append(box["result"])
        taken = True
    finally:
        if not taken:
            with handoff:
                box["abandoned"] = True
                if "result" in box:
                    on_abandoned(box["result"])


def with_last_message(stream: Iterator[Union[str, Heartbeat]], before_any: str) -> Iterator[str]:
    """Each heartbeat as the last message again (`before_any` until there is one), so a
    consumer that shows the status updates nothing visible but still gets its yield."""
    last = before_any
    for message in stream:
        if not isinstance(message, Heartbeat):
            last = message
        yield last
