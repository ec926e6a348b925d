"""RemoteArena: the engine's front door (demo.engine.backend.Backend) with the pipelines on a cluster.

The page (demo.web.ui.build_demo) and every other caller of a Backend keep working unchanged:
presets, devices, needs_operator, default_assistant_tokens, startup, admission and
summarize behave as in one process (a local Arena without pipelines answers them), and `run(request, stop)` yields the same events
(StatusEvent, StartEvent, ChunkEvent, DoneEvent). Only where the work happens differs:
`run` sends the request to the Race deployment (demo.serve.deployments), which fans it out
to a Baseline and a Speculative replica, maybe on two machines, and streams both back.

Clocks: each side's times (StartEvent.t, Chunk.t, RunResult.start/end) are taken where its
tokens are made, on that replica's perf_counter. They are shifted onto this process's
perf_counter when they arrive, so every duration the page shows is the replica's own and
nothing mixes two machines' clocks. While a side streams, one offset (fixed when its
StartEvent arrives) keeps its chunks in order; its final result takes the smallest offset
any of its events showed (the quickest trip here), so a StartEvent held up on a busy machine
cannot place the result after the moment it arrived.

Stop: closing the iterator (the page's Stop, a closed tab) or setting `stop` cancels the
streaming call; Ray carries the cancellation to the Race replica and from there to both
sides' replicas, where the streamer returns CANCEL (demo.serve.worker). With `stop` set,
the sides still running end with a cancelled DoneEvent here, as in one process.

No Ray import at module level: the handle is passed in (anything with
`.options(stream=True).run.remote(request)` that streams and can `cancel()`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Iterator, Optional

from ..core import placement
from ..core.errors import DemoError, unexpected
from ..core.streaming import SIDES, ChunkEvent, DoneEvent, StartEvent
from ..engine.arena import Arena, RaceRequest, Summary, validate_prompt
from .protocol import Refusal

STOP_POLL_S = 0.1


class _NoLocalPipelines:
    """The page process of a cluster loads no pipelines: what would need them says so."""

    def get(self, *args, **kwargs):
        raise DemoError(ONLY_ONE_MACHINE)

    fair = get

    def clear(self) -> None:
        pass


ONLY_ONE_MACHINE = ("This part of the page runs only in the single-machine app (python app.py); on the "
                    "cluster, use the Race tab.")


class RemoteArena:
    """A Backend whose races run on Ray Serve.

    `race` is a DeploymentHandle of the Race deployment; `devices` the devices the
    pipeline replicas see (asked once, when the page starts). Presets, the model store,
    admission, startup and the summary come from a local Arena that loads no pipelines.
    """

    def __init__(self, presets, store, race, devices: list, allow_downloads: bool = False):
        self._local = Arena(presets, store, cache=_NoLocalPipelines(), allow_downloads=allow_downloads)
        self.presets, self.store, self.cache = presets, store, self._local.cache
        self.guard = self._local.guard  # the replicas prove what they compile (demo.serve.worker.SideCache)
        self.admission, self.startup = self._local.admission, self._local.startup
        self._race = race
        self._devices = list(devices)
        self.startup.update("ready", "Ready. Type a prompt and press Run.")  # serve.run waited for the replicas

    @classmethod
    def connect(cls, race, devices: list, models_yaml=None, cache_dir=None, allow_downloads: bool = False):
        from ..models.presets import load_presets
        from ..models.sources import ModelStore

        return cls(load_presets(models_yaml), ModelStore(cache_dir), race, devices, allow_downloads)

    def devices(self) -> list[str]:
        return list(self._devices)

    def needs_operator(self, preset_name):
        return self._local.needs_operator(preset_name)

    def default_assistant_tokens(self, preset_name, mode: str = "race") -> int:
        return self._local.default_assistant_tokens(preset_name, mode)

    def skipped_configurations(self) -> list[str]:
        return self._local.skipped_configurations()

    # -- preparing and loading: the replicas do it -----------------------------------------
    def prepare(self, preset_name, status=lambda m: None, cancel=None, main_format=None, draft_format=None,
                baseline_format=None):
        # Preparing here would convert models in the page's process; the replicas prepare
        # their own (every node has the same prepared models: docs/SCALE-OUT.md).
        raise DemoError(ONLY_ONE_MACHINE)

    def runners(self, request: RaceRequest, status=lambda m: None, cancel=None) -> dict:
        raise DemoError(ONLY_ONE_MACHINE)

    def threads_to_use(self, request: RaceRequest, pair, status=None, prove: bool = True, cancel=None,
                       wanted="split"):
        raise DemoError(ONLY_ONE_MACHINE)

    def prepared(self, request: RaceRequest):
        return None  # nothing is prepared in the page's process

    def formats_for(self, request: RaceRequest) -> dict:
        return self._local.formats_for(request)

    def options_for(self, request: RaceRequest):
        return self._local.options_for(request)

    def admitted(self, what: str, stop: threading.Event, prepare, load):
        # The local slot, then `prepare` (this class's: the sentence above) refuses.
        return (yield from self._local.admitted(what, stop, prepare, load))

    def start_background_warmup(self, report=lambda m: None, calibrator=None):
        report("the pipelines load in their replicas (demo.serve); nothing to warm up here")
        return None

    # -- running --------------------------------------------------------------------------
    def run(self, request: RaceRequest, stop: Optional[threading.Event] = None, visitor=(),
            heartbeats: bool = False) -> Iterator:
        # `heartbeats` is accepted for the Backend protocol; none are sent yet: a replica's run is
        # iterated from Ray's stream, which this method cannot wake while it waits (a known gap).
        prompt = validate_prompt(request.prompt)
        request.settings.validated()
        request = replace(request, prompt=prompt)
        # One job per visitor here too; the replicas' own queues, not one slot, order the runs.
        with self.admission.visiting("a fair measurement" if request.mode == "fair" else "a race", visitor):
            yield from self._stream(request, stop or threading.Event())

    def _stream(self, request: RaceRequest, stop: threading.Event) -> Iterator:
        stream = self._race.options(stream=True).run.remote(request)
        finished = threading.Event()

        def watch_stop() -> None:  # ends with the run: bounded by `finished`
            while not finished.is_set():
                if stop.wait(STOP_POLL_S):
                    stream.cancel()
                    return

        threading.Thread(target=watch_stop, name="remote-stop", daemon=True).start()
        clock = _Clocks()
        done: set = set()
        try:
            try:
                for event in stream:
                    if isinstance(event, Refusal):
                        raise DemoError(event.message)
                    event = clock.local(event)
                    if isinstance(event, DoneEvent):
                        done.add(event.side)
                    yield event
            except DemoError:
                raise
            except Exception as e:
                if not stop.is_set():
                    raise DemoError(_cluster_failure(e)) from None
            if stop.is_set():  # as race(): the sides still running end as cancelled
                for side in SIDES:
                    if side not in done and side in clock.started:
                        yield DoneEvent(side, clock.cancelled_result(side))
        finally:
            finished.set()
            if len(done) < len(SIDES):
                stream.cancel()  # closed early (Stop, tab closed): stop both sides now

    # -- results --------------------------------------------------------------------------
    def summarize(self, results: dict, request: RaceRequest) -> Summary:
        summary = self._local.summarize(results, request)
        return replace(summary, how=how_it_ran_on_cluster(request, results))


def how_it_ran_on_cluster(request: RaceRequest, results: dict) -> str:
    """How a race ran on the cluster, with where each side ran."""
    options = request.options
    split = ("both pipelines at once on Ray Serve, each in its own replica" if request.mode == "race" else
             "fair mode on Ray Serve: each pipeline alone, one after the other, then replayed side by side")
    where = "; ".join(f"{side} ran on {getattr(results.get(side), 'ran_on', None) or 'an unknown node'}"
                      for side in SIDES)
    devices = f"main on {options.main_device}"
    devices += (f", draft on {options.draft_device}" if request.settings.method == "draft"
                else ", prompt lookup (no draft)")
    # Each replica adds its own threads to these (deployments.py); the precision is the same.
    precision = placement.precision_words(options, request.settings.method)
    served = "".join(f"; {side}: {results[side].served}" for side in SIDES
                     if getattr(results.get(side), "served", None))  # a batching replica's own words
    return f"{split}; {where}; {devices}; {precision}{served}"


class _Clocks:
    """Shifts each side's replica times onto this process's perf_counter."""

    def __init__(self):
        self.offsets: dict = {}   # side -> the offset its StartEvent showed (for streaming)
        self.quickest: dict = {}  # side -> the smallest offset any of its events showed
        self.started: dict = {}   # side -> local start
        self.chunks: dict = {side: [] for side in SIDES}

    def _offset(self, side: str, remote_t: float) -> float:
        seen = time.perf_counter() - remote_t  # the true offset plus this event's trip here
        self.offsets.setdefault(side, seen)
        self.quickest[side] = min(self.quickest.get(side, seen), seen)
        return self.offsets[side]

    def local(self, event):
        if isinstance(event, StartEvent):
            t = event.t + self._offset(event.side, event.t)
            self.started[event.side] = t
            return StartEvent(event.side, t)
        if isinstance(event, ChunkEvent):
            c = event.chunk
            chunk = replace(c, t=c.t + self._offset(event.side, c.t))
            self.chunks.setdefault(event.side, []).append(chunk)
            return replace(event, chunk=chunk)
        if isinstance(event, DoneEvent):
            r = event.result
            self._offset(event.side, r.end)
            off = self.quickest[event.side]
            return DoneEvent(event.side, replace(r, start=r.start + off, end=r.end + off,
                                                 chunks=[replace(c, t=c.t + off) for c in r.chunks]))
        return event  # StatusEvent

    def cancelled_result(self, side: str):
        from ..core.streaming import RunResult

        chunks = list(self.chunks.get(side, []))
        start = self.started[side]
        return RunResult(side, start=start, end=time.perf_counter(), chunks=chunks, cancelled=True)


def _cluster_failure(e: BaseException) -> str:
    unexpected("the cluster's race call", e)  # Ray's words go to the log, not to the page
    return ("The cluster could not run this race; try again, and if it persists the operator can check "
            "the server log, `ray status` and `serve status`.")

