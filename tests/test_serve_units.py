"""The cluster backend's logic without Ray: the merge of the two sides' streams, one side's
worker in a replica, RemoteArena over a fake handle, serve.yaml, and that the single-machine
app never imports Ray. (tests/test_serve.py runs the real thing on a local Ray cluster.)"""

import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from demo.core.errors import UNEXPECTED, DemoError
from demo.core.settings import GenerationSettings
from demo.core.streaming import BASELINE, SPECULATIVE, Chunk, ChunkEvent, DoneEvent, RunResult, StartEvent, StatusEvent
from demo.engine.arena import RaceRequest
from demo.serve import config as serve_config
from demo.serve.merge import WAITING_NOTE, merge_sides, race_streams
from demo.serve.protocol import Refusal, placement
from demo.serve.remote import RemoteArena, how_it_ran_on_cluster
from demo.serve.worker import SideWorker
from tests.fakes import FakeRunner

REPO = Path(__file__).resolve().parents[1]


def chunk(side, n, t):
    return Chunk(side, (n,), f"t{n} ", "", t)


# -- the merge (what the Race deployment runs) ------------------------------------------------

class Script:
    """Releases the streams' events in one global order, so that arrival order is certain."""

    def __init__(self, order):
        self.order = order          # [(side, event or Exception)]
        self.turn = 0
        self.changed = asyncio.Event()

    def stream(self, side):
        return ScriptedStream(self, side)


class ScriptedStream:
    def __init__(self, script, side):
        self.script, self.side = script, side
        self.cancelled = False
        self.mine = [i for i, (s, _) in enumerate(script.order) if s == side]

    def __aiter__(self):
        return self

    async def __anext__(self):
        if not self.mine:
            raise StopAsyncIteration
        i = self.mine.pop(0)
        while self.script.turn != i:
            self.script.changed.clear()
            await self.script.changed.wait()
        _, item = self.script.order[i]
        self.script.turn += 1
        self.script.changed.set()
        if isinstance(item, Exception):
            raise item
        return item

    def cancel(self):
        self.cancelled = True


def collect(agen, limit=None):
    async def go():
        out = []
        async for e in agen:
            out.append(e)
            if limit is not None and len(out) >= limit:
                await agen.aclose()
                break
        return out
    return asyncio.run(asyncio.wait_for(go(), 10))


def done(side, chunks=(), start=0.0, end=1.0):
    return DoneEvent(side, RunResult(side, start=start, end=end, chunks=list(chunks)))


def label(e):
    return f"{type(e).__name__[0]}:{getattr(e, 'side', '')[:1]}"


def test_merge_interleaves_sides_as_they_arrive_after_both_started():
    b1, b2, s1 = chunk(BASELINE, 1, 0.1), chunk(BASELINE, 2, 0.2), chunk(SPECULATIVE, 1, 0.3)
    script = Script([(BASELINE, StartEvent(BASELINE, 0.0)), (BASELINE, ChunkEvent(BASELINE, b1)),
                     (SPECULATIVE, StartEvent(SPECULATIVE, 0.0)), (BASELINE, ChunkEvent(BASELINE, b2)),
                     (SPECULATIVE, ChunkEvent(SPECULATIVE, s1)), (SPECULATIVE, done(SPECULATIVE, [s1])),
                     (BASELINE, done(BASELINE, [b1, b2]))])
    out = collect(merge_sides({BASELINE: script.stream(BASELINE), SPECULATIVE: script.stream(SPECULATIVE)}))
    # Arrival order: the speculative side finished first, while the baseline still ran.
    assert [label(e) for e in out] == ["S:b", "C:b", "S:s", "C:b", "C:s", "D:s", "D:b"]


def test_a_sides_events_wait_until_the_other_side_has_started():
    class Gated:
        def __init__(self, side, gate, events):
            self.side, self.gate, self.events = side, gate, events

        def __aiter__(self):
            return self

        async def __anext__(self):
            if not self.events:
                raise StopAsyncIteration
            if self.gate is not None:
                await self.gate.wait()
            return self.events.pop(0)

        def cancel(self):
            pass

    async def go():
        gate = asyncio.Event()
        streams = {BASELINE: Gated(BASELINE, None, [StartEvent(BASELINE, 0.0), done(BASELINE)]),
                   SPECULATIVE: Gated(SPECULATIVE, gate, [StartEvent(SPECULATIVE, 0.0), done(SPECULATIVE)])}
        seen = []

        async def consume():
            async for e in merge_sides(streams):
                seen.append((label(e), gate.is_set()))

        task = asyncio.ensure_future(consume())
        await asyncio.sleep(0.2)  # the baseline has started and even finished meanwhile
        gate.set()                # now the speculative side starts
        await task
        return seen

    seen = asyncio.run(asyncio.wait_for(go(), 10))
    assert [s for s, _ in seen] == ["S:b", "D:b", "S:s", "D:s"]
    assert all(after_gate for _, after_gate in seen), "the baseline's events went out before the other side started"


def test_a_refusal_ends_the_race_alone_and_cancels_the_other_side():
    script = Script([(BASELINE, StartEvent(BASELINE, 0.0)), (BASELINE, ChunkEvent(BASELINE, chunk(BASELINE, 1, 0.1))),
                     (SPECULATIVE, Refusal(SPECULATIVE, "The prompt is 5000 tokens long.")),
                     (BASELINE, done(BASELINE))])
    streams = {BASELINE: script.stream(BASELINE), SPECULATIVE: script.stream(SPECULATIVE)}
    out = collect(merge_sides(streams))
    assert out == [Refusal(SPECULATIVE, "The prompt is 5000 tokens long.")]  # nothing of the half-started baseline
    assert streams[BASELINE].cancelled


def test_a_broken_side_fails_with_what_it_delivered_and_the_other_side_finishes():
    b1 = chunk(BASELINE, 1, 5.5)
    s1 = chunk(SPECULATIVE, 1, 0.2)
    script = Script([(BASELINE, StartEvent(BASELINE, 5.0)), (SPECULATIVE, StartEvent(SPECULATIVE, 0.0)),
                     (BASELINE, ChunkEvent(BASELINE, b1)), (BASELINE, RuntimeError("replica died\nmore")),
                     (SPECULATIVE, ChunkEvent(SPECULATIVE, s1)), (SPECULATIVE, done(SPECULATIVE, [s1]))])
    out = collect(merge_sides({BASELINE: script.stream(BASELINE), SPECULATIVE: script.stream(SPECULATIVE)}))
    results = {e.side: e.result for e in out if isinstance(e, DoneEvent)}
    broken = results[BASELINE]
    assert "baseline pipeline's stream broke" in broken.error and UNEXPECTED in broken.error
    assert "replica died" not in broken.error and "RuntimeError" not in broken.error  # to the log only
    assert broken.chunks == [b1] and broken.start == 5.0 and broken.end == 5.5  # the side's own clock
    assert results[SPECULATIVE].error is None and results[SPECULATIVE].chunks == [s1]


def test_leaving_the_merge_early_cancels_both_sides():
    script = Script([(BASELINE, StartEvent(BASELINE, 0.0)), (SPECULATIVE, StartEvent(SPECULATIVE, 0.0)),
                     (BASELINE, ChunkEvent(BASELINE, chunk(BASELINE, 1, 0.1))),
                     (SPECULATIVE, ChunkEvent(SPECULATIVE, chunk(SPECULATIVE, 1, 0.1))),
                     (BASELINE, done(BASELINE)), (SPECULATIVE, done(SPECULATIVE))])
    streams = {BASELINE: script.stream(BASELINE), SPECULATIVE: script.stream(SPECULATIVE)}
    out = collect(race_streams(lambda side: streams[side], "race"), limit=3)
    assert len(out) == 3
    assert streams[BASELINE].cancelled and streams[SPECULATIVE].cancelled


def test_fair_mode_opens_the_speculative_side_only_after_the_baseline_ended():
    opened = []

    class Stream:
        def __init__(self, side):
            self.side, self.events = side, [StartEvent(side, 0.0), done(side)]

        def __aiter__(self):
            return self

        async def __anext__(self):
            if not self.events:
                raise StopAsyncIteration
            await asyncio.sleep(0)
            return self.events.pop(0)

        def cancel(self):
            pass

    def open_side(side):
        opened.append((side, list(seen)))
        return Stream(side)

    seen = []

    async def go():
        async for e in race_streams(open_side, "fair"):
            seen.append(label(e))

    asyncio.run(asyncio.wait_for(go(), 10))
    assert seen == ["S:b", "D:b", "S:s", "D:s"]
    assert opened == [(BASELINE, []), (SPECULATIVE, ["S:b", "D:b"])]


def test_a_race_waiting_for_free_replicas_says_so():
    class Silent:
        def __init__(self):
            self.sent = False

        def __aiter__(self):
            return self

        async def __anext__(self):
            if self.sent:
                raise StopAsyncIteration
            await asyncio.sleep(0.3)  # every replica busy: the request waits in Ray's queue
            self.sent = True
            return Refusal(BASELINE, "no")

        def cancel(self):
            pass

    out = collect(merge_sides({BASELINE: Silent()}, waiting_note_s=0.05))
    assert out == [StatusEvent(WAITING_NOTE), Refusal(BASELINE, "no")]


# -- one side's worker (what a Baseline / Speculative replica runs) -----------------------------

def request(prompt="Write a story.", **settings):
    return RaceRequest(prompt=prompt, settings=GenerationSettings(**settings))


def test_a_replicas_journal_keeps_no_prompt_text():
    # Issue 21: without --keep-prompts no visitor's prompt is stored, in the replica's journal neither.
    runner = FakeRunner(BASELINE, [1, 1], delay_s=0.001)
    worker = SideWorker(BASELINE, lambda req, status: runner, "node-a, 1 thread")
    secret = "my secret question about my own medical history"

    async def go():
        return [e async for e in worker.run(request(prompt=secret, max_new_tokens=7))]

    asyncio.run(asyncio.wait_for(go(), 10))
    entry = worker.recent_runs()[-1]
    assert secret not in repr(worker.recent_runs()) and "secret" not in repr(entry)
    assert entry["prompt_chars"] == len(secret) and entry["max_new_tokens"] == 7


def test_cancelling_a_replica_run_stops_the_runner_within_a_step():
    runner = FakeRunner(BASELINE, [1] * 500, delay_s=0.01)
    worker = SideWorker(BASELINE, lambda req, status: runner, "node-a, 1 thread")
    got = []

    async def consume():
        async for e in worker.run(request()):
            got.append(e)

    async def go():
        task = asyncio.ensure_future(consume())
        while sum(isinstance(e, ChunkEvent) for e in got) < 3:
            await asyncio.sleep(0.005)
        task.cancel()  # what Ray does when the caller cancels the streaming call
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(asyncio.wait_for(go(), 10))
    assert runner.finished.wait(5), "the runner kept generating after the request was cancelled"
    entry = worker.recent_runs()[-1]
    assert entry["stop_at"] is not None and entry["cancelled"] is True and entry["error"] is None
    late = [t for t in entry["chunks"] if t > entry["stop_at"]]
    assert len(late) <= 1, f"{len(late)} steps after the stop flag"
    assert runner.delivered < 20


def test_a_finished_replica_run_says_where_it_ran():
    runner = FakeRunner(SPECULATIVE, [3, 2, 1], delay_s=0.001)
    worker = SideWorker(SPECULATIVE, lambda req, status: runner, placement("0123456789abcdef", 2, host="gpu-box"))

    async def go():
        return [e async for e in worker.run(request())]

    events = asyncio.run(asyncio.wait_for(go(), 10))
    assert [type(e).__name__ for e in events] == ["StartEvent"] + ["ChunkEvent"] * 3 + ["DoneEvent"]
    assert events[-1].result.ran_on == "gpu-box (node 01234567), 2 threads"
    assert worker.recent_runs()[-1]["stop_at"] is None  # a run that finished was never stopped


@pytest.mark.parametrize("failure, message", [
    (DemoError("The prompt is 5000 tokens long; shorten it."), "The prompt is 5000 tokens long; shorten it."),
    (RuntimeError("boom /secret/dir"), f"The baseline pipeline could not be loaded: {UNEXPECTED}."),
])
def test_a_replica_that_cannot_run_the_request_refuses_it(failure, message):
    def load(req, status):
        status("loading the baseline pipeline")
        raise failure

    worker = SideWorker(BASELINE, load, "here")

    async def go():
        return [e async for e in worker.run(request())]

    events = asyncio.run(asyncio.wait_for(go(), 10))
    assert events == [StatusEvent("baseline: loading the baseline pipeline"), Refusal(BASELINE, message)]


# -- RemoteArena over a fake Race handle --------------------------------------------------------

class FakeGen:
    """A streaming call's sync iterator: yields `events`, then blocks until cancelled (or ends)."""

    def __init__(self, events, block=False):
        self.events, self.block = list(events), block
        self.cancelled = threading.Event()

    def __iter__(self):
        return self

    def __next__(self):
        if self.events:
            return self.events.pop(0)
        if self.block and not self.cancelled.wait(10):
            raise AssertionError("never cancelled")
        if self.cancelled.is_set():
            raise RuntimeError("cancelled")  # as Ray's RequestCancelledError
        raise StopIteration

    def cancel(self):
        self.cancelled.set()


class FakeHandle:
    def __init__(self, gen):
        self.gen, self.requests = gen, []
        self.run = self

    def options(self, stream):
        assert stream is True
        return self

    def remote(self, req):
        self.requests.append(req)
        return self.gen


@pytest.fixture
def remote(presets, tmp_path):
    from demo.models.sources import ModelStore

    def make(gen):
        handle = FakeHandle(gen)
        return RemoteArena(presets, ModelStore(tmp_path), handle, ["CPU"]), handle
    return make


def test_remote_run_moves_replica_clocks_onto_ours_and_keeps_every_duration(remote):
    far = 1_000_000.0  # another machine's perf_counter
    c1, c2 = chunk(BASELINE, 1, far + 0.25), chunk(BASELINE, 2, far + 0.5)
    result = RunResult(BASELINE, start=far, end=far + 0.75, chunks=[c1, c2], ran_on="node-b")
    arena, handle = remote(FakeGen([StatusEvent("loading"), StartEvent(BASELINE, far), ChunkEvent(BASELINE, c1),
                                    ChunkEvent(BASELINE, c2), DoneEvent(BASELINE, result)]))
    before = time.perf_counter()
    events = list(arena.run(request(prompt="bad \ud800 char")))
    after = time.perf_counter()
    assert handle.requests[0].prompt == "bad \ufffd char"  # validated here, before the cluster sees it
    start, d = events[1], events[-1].result
    assert before <= start.t <= after
    assert [e.chunk.t - start.t for e in events[2:4]] == pytest.approx([0.25, 0.5])
    assert (d.end - d.start, d.ran_on) == (pytest.approx(0.75), "node-b")
    assert [c.t - d.start for c in d.chunks] == pytest.approx([0.25, 0.5])
    # These events all arrived at once, so the result's quickest trip puts it before `after`.
    assert d.start <= start.t and d.end <= after


def test_a_held_up_start_cannot_place_the_result_after_it_arrived(remote):
    """A busy machine delays the StartEvent by 2 s; the Done arrives at once: the result keeps
    its own durations and ends no later than it reached us (the quickest trip sets its offset)."""
    far = 1_000_000.0 - time.perf_counter()  # the replica's clock: ours plus `far`

    class Replica(FakeGen):
        def __next__(self):
            now = time.perf_counter() + far
            if not self.events:
                raise StopIteration
            made = self.events.pop(0)
            if made == "start":
                return StartEvent(BASELINE, now - 2.0)  # made 2 s ago, held up on the way
            return DoneEvent(BASELINE, RunResult(BASELINE, start=now - 2.0, end=now - 0.01,
                                                 chunks=[chunk(BASELINE, 1, now - 1.0)]))

    arena, _ = remote(Replica(["start", "done"]))
    events = list(arena.run(request()))
    after = time.perf_counter()
    d = events[-1].result
    assert d.end <= after
    assert (d.end - d.start, d.chunks[0].t - d.start) == (pytest.approx(1.99), pytest.approx(1.0))


def test_a_refusal_from_the_cluster_is_the_users_sentence(remote):
    gen = FakeGen([StatusEvent("baseline: loading"), Refusal(SPECULATIVE, "The prompt is 5000 tokens long.")])
    arena, _ = remote(gen)
    events = arena.run(request())
    assert next(events) == StatusEvent("baseline: loading")
    with pytest.raises(DemoError, match="^The prompt is 5000 tokens long.$"):
        next(events)


def test_a_broken_cluster_is_one_sentence(remote):
    class Broken(FakeGen):
        def __next__(self):
            raise ConnectionError("GCS unreachable")

    arena, _ = remote(Broken([]))
    with pytest.raises(DemoError, match=r"^The cluster could not run this race; try again") as info:
        list(arena.run(request()))
    assert "GCS unreachable" not in str(info.value) and "ConnectionError" not in str(info.value)


def test_stop_cancels_the_streaming_call_and_ends_started_sides_as_cancelled(remote):
    gen = FakeGen([StartEvent(BASELINE, 3.0), ChunkEvent(BASELINE, chunk(BASELINE, 1, 3.1))], block=True)
    arena, _ = remote(gen)
    stop = threading.Event()
    events = arena.run(request(), stop)
    assert isinstance(next(events), StartEvent) and isinstance(next(events), ChunkEvent)
    threading.Timer(0.05, stop.set).start()
    rest = list(events)  # blocks until the stop reaches the call: cancel() ends the iteration
    assert gen.cancelled.is_set()
    assert len(rest) == 1 and rest[0].side == BASELINE and rest[0].result.cancelled
    assert [c.token_ids for c in rest[0].result.chunks] == [(1,)]


def test_closing_the_run_early_cancels_the_streaming_call(remote):
    gen = FakeGen([StartEvent(BASELINE, 3.0)], block=True)
    arena, _ = remote(gen)
    events = arena.run(request())
    next(events)
    events.close()  # what the page does on Stop or a closed tab
    assert gen.cancelled.is_set()


def test_the_summary_says_where_each_side_ran(remote):
    arena, _ = remote(FakeGen([]))
    b = RunResult(BASELINE, 0.0, 1.0, [chunk(BASELINE, 1, 0.5)], ran_on="alpha (node 11111111), 1 thread")
    s = RunResult(SPECULATIVE, 0.0, 1.0, [chunk(SPECULATIVE, 1, 0.5)], ran_on="beta (node 22222222), 1 thread")
    req = RaceRequest(prompt="x", preset="smollm2-self-draft")
    how = arena.summarize({BASELINE: b, SPECULATIVE: s}, req).how
    assert "baseline ran on alpha (node 11111111), 1 thread" in how
    assert "speculative ran on beta (node 22222222), 1 thread" in how
    assert how.startswith("both pipelines at once on Ray Serve")
    assert how_it_ran_on_cluster(RaceRequest(prompt="x", mode="fair"), {}).startswith("fair mode on Ray Serve")


def test_the_cluster_page_never_loads_pipelines_itself(remote):
    arena, _ = remote(FakeGen([]))
    with pytest.raises(DemoError, match="single-machine app"):
        arena.prepare("smollm2-self-draft")
    with pytest.raises(DemoError, match="single-machine app"):
        arena.cache.get("main", None, "draft", None)
    assert arena.devices() == ["CPU"] and arena.startup.get()[0] == "ready"


# -- serve.yaml -------------------------------------------------------------------------------

def test_serve_yaml_documents_the_production_shape():
    conf = serve_config.load(REPO / "serve.yaml")
    d = conf.deployments
    for side in ("Baseline", "Speculative"):
        assert d[side]["max_ongoing_requests"] == conf.args["batch_requests"] > 1  # runs that arrive together are batched
        assert d[side]["autoscaling_config"]["max_replicas"] > d[side]["autoscaling_config"]["min_replicas"] >= 1
        assert d[side]["ray_actor_options"]["num_cpus"] >= 1 and d[side]["ray_actor_options"]["memory"] > 0
    assert d["Page"]["request_router_config"]["request_router_class"].endswith("ConsistentHashRouter")
    assert conf.http_options["host"] == "127.0.0.1"
    small = serve_config.for_one_machine(conf, cores=2)
    for side in ("Baseline", "Speculative"):
        assert small.deployments[side]["ray_actor_options"] == {"num_cpus": 1}
        assert small.deployments[side]["num_replicas"] == 1 and "autoscaling_config" not in small.deployments[side]
    assert "request_router_config" not in small.deployments["Page"]
    assert "request_router_config" in conf.deployments["Page"]  # the original is left alone


@pytest.mark.parametrize("change, message", [
    (lambda a: a["deployments"][0].update(max_ongoing_requests=2), "Baseline must set max_ongoing_requests: 4"),
    (lambda a: a["args"].update(batch_requests=0), "batch_requests must be a whole number from 1 to 16"),
    (lambda a: a["args"].update(crossover="two"), "crossover must be a whole number"),
    (lambda a: a["deployments"].append({"name": "Draft"}), "deployment 'Draft' is not one of"),
    (lambda a: a["args"].update(presett="x"), "unknown args ['presett']"),
    (lambda a: a.update(import_path="app:demo"), "import_path must be demo.serve.deployments:app_builder"),
])
def test_serve_yaml_mistakes_are_named(change, message):
    import yaml

    data = yaml.safe_load((REPO / "serve.yaml").read_text())
    change(data["applications"][0])
    with pytest.raises(DemoError) as info:
        serve_config.parse(data)
    assert message in str(info.value)


# -- Ray stays optional -----------------------------------------------------------------------

def test_the_single_machine_app_never_imports_ray():
    """Importing app and every demo module outside demo.serve (and demo.serve's Ray-free
    modules) must not load Ray, installed or not."""
    code = """
import importlib, pkgutil, sys
import app, demo
names = [m.name for m in pkgutil.walk_packages(demo.__path__, "demo.")]
outside = [n for n in names if not n.startswith("demo.serve")]
assert len(outside) > 20, outside
for n in outside:
    importlib.import_module(n)
assert "ray" not in sys.modules, "imported ray: " + str([m for m in sys.modules if m.startswith("ray")][:5])
for n in ["demo.serve", "demo.serve.protocol", "demo.serve.merge", "demo.serve.worker", "demo.serve.remote",
          "demo.serve.page", "demo.serve.config", "demo.serve.cluster"]:
    importlib.import_module(n)
assert "ray" not in sys.modules, "a Ray-free demo.serve module imported ray"
print("ok", len(outside))
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0 and proc.stdout.startswith("ok"), proc.stderr[-3000:]


def test_the_cluster_page_also_gives_each_visitor_one_race(remote):
    """RemoteArena counts a visitor's race while it streams (Admission.visit): a second one
    from the same visitor is refused, another visitor's is sent, and the first one's end frees it."""
    gen = FakeGen([StartEvent(BASELINE, 3.0)], block=True)
    arena, handle = remote(gen)
    first = arena.run(request(), visitor=("session:a",))
    next(first)
    with pytest.raises(DemoError, match="^You already have a race running or waiting; wait for it to finish or press Stop.$"):
        next(arena.run(request(), visitor=("session:a",)))
    assert len(handle.requests) == 1  # the refused one never reached the cluster
    other = arena.run(request(), visitor=("session:b",))
    handle.gen = FakeGen([StartEvent(BASELINE, 3.0)], block=True)
    next(other)
    first.close()  # Stop
    other.close()
    handle.gen = FakeGen([StartEvent(BASELINE, 3.0)], block=True)
    again = arena.run(request(), visitor=("session:a",))
    next(again)
    again.close()
    assert len(handle.requests) == 3


def test_a_request_with_a_mode_that_is_neither_race_nor_fair_is_one_sentence():
    # The one check of a mode (RaceRequest): a request from the cluster, the API or a script cannot
    # reach the engine with another mode, which would otherwise be read as race in one place and
    # fair in another.
    with pytest.raises(DemoError, match=r"^The mode 'sprint' is neither race nor fair; choose one of the two\.$"):
        RaceRequest(prompt="x", mode="sprint")
    assert RaceRequest(prompt="x", mode="fair").mode == "fair"
