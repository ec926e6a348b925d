"""Many requests in one OpenVINO GenAI continuous-batching pipeline, each streamed on its own.

OpenVINO's ContinuousBatchingPipeline takes requests with `add_request` (one generation
handle each) and advances every running request by one step per `step()`. BatchedPipeline
drives it from one thread: requests submitted from any thread join at the next step
boundary, every step's new tokens go to their request's callback with the step's time, and
the thread ends when nothing is left to run. The load benchmark (demo.bench.load) and a
Serve replica (demo.serve) use it; tests drive it with a fake pipeline of the same shape.

Drafting under load, per request: OpenVINO GenAI 2026.4 cannot run a request without
drafting inside a speculative pipeline (add_request asserts that K or a threshold is set, a
generate() with K=0 gets K=5, and every step drafts at least one token for every request),
and a request's K is fixed when it joins. So a request that joins while the running
requests, itself included, are at or above `crossover` goes to `plain`, a pipeline of the
main model alone, stepped by the same thread in turn with the speculative one.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

OnStep = Callable[[tuple, float], bool]  # (new token ids, perf_counter) -> keep going?


@dataclass
class BatchedRequest:
    """One request's life in the batch, as the driver saw it (perf_counter times)."""

    id: int
    submitted: float
    on_step: OnStep = field(repr=False)
    config: Any = field(repr=False)          # the GenerationConfig it runs with
    plain_config: Any = field(repr=False)    # the same without drafting (None: keep drafting)
    prompt: Any = field(repr=False)
    admitted: Optional[float] = None          # when it joined the pipeline
    running_at_admission: int = 0             # requests running once it joined, itself included
    drafting: bool = True                     # False: it joined the plain pipeline (the step-aside)
    steps: list = field(default_factory=list)  # (t, tokens this step)
    sharing: int = 0                          # most other requests served beside it in one round of steps
    finished: Optional[float] = None
    status: str = "pending"                   # pending | running | finished | cancelled | failed
    error: Optional[str] = None
    done: threading.Event = field(default_factory=threading.Event, repr=False)
    handle: Any = field(default=None, repr=False)
    cancel_asked: bool = False
    tag: Optional[str] = None                 # the caller's name for it (the load benchmark: the prompt's id)

    def cancel(self) -> None:
        """Stop at the next step boundary (the driver drops it from the pipeline)."""
        self.cancel_asked = True

    @property
    def tokens(self) -> int:
        return sum(n for _, n in self.steps)


class BatchedPipeline:
    """One continuous-batching pipeline, many requests, one driving thread.

    `pipe` has the ContinuousBatchingPipeline interface (add_request, step,
    has_non_finished_requests). `crossover`: running requests at which new ones stop
    drafting, by joining `plain` (the main model alone) instead of `pipe`; without both,
    every request joins `pipe`."""

    def __init__(self, pipe, crossover: Optional[int] = None, name: str = "batch", plain=None):
        self.pipe = pipe
        self.plain = plain
        self.crossover = crossover
        self.name = name
        self._cv = threading.Condition()
        self._pending: list[BatchedRequest] = []
        self._running: dict[int, BatchedRequest] = {}
        self._ids = itertools.count()
        self._thread: Optional[threading.Thread] = None
        self.steps = 0  # pipeline steps taken, for tokens per step

    def submit(self, prompt, config, on_step: OnStep, plain_config=None) -> BatchedRequest:
        """Queue a request; it joins the pipeline at the next step boundary. `plain_config`
        is how it runs when it joins at or above the crossover (None: as `config`)."""
        request = BatchedRequest(next(self._ids), time.perf_counter(), on_step, config, plain_config, prompt)
        with self._cv:
            self._pending.append(request)
            self._start()
        return request

    def submit_many(self, items: list) -> list[BatchedRequest]:
        """Queue several (prompt, config, on_step) requests so that they join at the same step."""
        now = time.perf_counter()
        requests = [BatchedRequest(next(self._ids), now, on_step, config, None, prompt)
                    for prompt, config, on_step in items]
        with self._cv:
            self._pending.extend(requests)
            self._start()
        return requests

    def _start(self) -> None:
        if self._thread is None:  # called under the lock
            self._thread = threading.Thread(target=self._drive, name=f"{self.name}-driver", daemon=True)
            self._thread.start()

    def running(self) -> int:
        with self._cv:
            return len(self._running)

    def _drive(self) -> None:
        while True:
            with self._cv:
                if not self._pending and not self._running:
                    self._thread = None  # under the lock: a submit now starts a new driver
                    return
                joining, self._pending = self._pending, []
            for request in joining:
                self._admit(request)
            self._drop_cancelled()
            stepped: list = []
            for drafting in (True, False):  # one step of each pipeline that has requests, in turn
                lane = [r for r in self._running.values() if r.drafting == drafting]
                if not lane:
                    continue
                pipe = self.pipe if drafting else self.plain
                try:
                    pipe.step()
                except Exception as e:  # a native failure ends this pipeline's requests, not the process
                    from .openvino_runner import first_line

                    self._finish_all(lane, "failed", first_line(e))
                    continue
                self.steps += 1
                stepped += self._collect(pipe, lane, time.perf_counter())
            for request in stepped:  # requests served in this round of steps, both pipelines together
                request.sharing = max(request.sharing, len(stepped) - 1)

    def _admit(self, request: BatchedRequest) -> None:
        if request.cancel_asked:
            self._end(request, "cancelled")
            return
        running = len(self._running) + 1
        request.drafting = not (request.plain_config is not None and self.plain is not None
                                and self.crossover is not None and running >= self.crossover)
        config = request.config if request.drafting else request.plain_config
        try:
            request.handle = (self.pipe if request.drafting else self.plain).add_request(request.id, request.prompt,
                                                                                         config)
        except Exception as e:
            from .openvino_runner import first_line

            request.error = first_line(e)
            self._end(request, "failed")
            return
        request.admitted = time.perf_counter()
        request.running_at_admission = running
        request.status = "running"
        with self._cv:
            self._running[request.id] = request

    def _drop_cancelled(self) -> None:
        for request in [r for r in self._running.values() if r.cancel_asked]:
            request.handle.cancel()  # OpenVINO drops it at its next step
            self._end(request, "cancelled")

    def _collect(self, pipe, lane: list, t: float) -> list:
        stepped = []
        for request in lane:
            ids: list = []
            while request.handle.can_read():
                for output in request.handle.read().values():
                    ids.extend(output.generated_ids)
            if ids:
                stepped.append(request)
                request.steps.append((t, len(ids)))
                try:
                    keep = request.on_step(tuple(ids), t)
                except Exception:  # a caller's bug must not stop the other requests
                    keep = False
                if not keep:
                    request.cancel()
            status = _status_name(request.handle.get_status())
            if status != "running":
                self._end(request, "finished" if status == "finished" else status)
        left = [r for r in lane if r.id in self._running]
        if left and not pipe.has_non_finished_requests():
            self._finish_all(left, "finished")  # the pipeline is done with them though no status said so
        return stepped

    def _finish_all(self, requests: list, status: str, error: Optional[str] = None) -> None:
        for request in requests:
            request.error = request.error or error
            self._end(request, status)

    def _end(self, request: BatchedRequest, status: str) -> None:
        with self._cv:
            self._running.pop(request.id, None)
        request.status = status
        request.finished = time.perf_counter()
        request.done.set()


def _status_name(status) -> str:
    """OpenVINO's GenerationStatus (or a fake's string) as a lower-case name."""
    name = getattr(status, "name", status)
    return {"RUNNING": "running", "FINISHED": "finished", "IGNORED": "failed", "CANCEL": "cancelled",
            "STOP": "cancelled", "DROPPED_BY_HANDLE": "cancelled"}.get(str(name).upper(), "running")
