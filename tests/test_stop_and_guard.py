"""A Stop that lands anywhere, and every OpenVINO compile proven first (issue 31, the engine's half).

The guard's children run tests/guard_stand_ins.py (no OpenVINO: each answers in a fraction of
a second); the streams run fake runners whose "prefill" or "load" blocks until the test lets
it go, so what is checked is the order of events, never a wall-clock bound.
"""

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from demo.core.errors import DemoError
from demo.core.settings import GenerationSettings
from demo.core.streaming import BASELINE, HEARTBEAT, SIDES, SPECULATIVE, DoneEvent, StartEvent
from demo.engine import arena as arena_module, three_way
from demo.engine.arena import Arena, RaceRequest
from demo.engine.race import one_by_one, race
from demo.engine.native_guard import CRASHES, WORKS, NativeConfig, NativeGuard, SafetyRecord

from .fakes import FakeRunner
from .test_recording import fake_arena

STAND_INS = "tests.guard_stand_ins"
SETTINGS = GenerationSettings(max_new_tokens=8, assistant_tokens=3)


@pytest.fixture
def attempts(tmp_path, monkeypatch):
    log = tmp_path / "attempts.log"
    monkeypatch.setenv("GUARD_LOG", str(log))
    return lambda: len(log.read_text().splitlines()) if log.exists() else 0


def guard_on(cache: Path, target: str, **kw) -> NativeGuard:
    return NativeGuard(SafetyRecord(cache, machine_key="test"), target=f"{STAND_INS}:{target}", **kw)


def arena_with(tmp_path, presets, guard) -> tuple:
    """An Arena whose guard is `guard`, and a pair of model folders (they need not exist: the guard's
    children are stand-ins)."""
    arena = Arena(presets, store=SimpleNamespace(cache_dir=tmp_path), guard=guard)
    pair = SimpleNamespace(main=tmp_path / "main", draft=tmp_path / "draft", baseline=None)
    return arena, pair


REQUEST = RaceRequest(prompt="hi", preset="smollm2-self-draft", settings=SETTINGS)


# -- the guard fails closed ---------------------------------------------------------------------

def test_a_configuration_whose_verdict_cannot_be_saved_is_never_used(tmp_path, presets, attempts):
    """A full disk (here: the record's folder is a file) left the record empty, and the app
    compiled the configuration unproven. Now nothing unrecorded is used."""
    (tmp_path / "safety").write_text("not a folder")
    arena, pair = arena_with(tmp_path, presets, guard_on(tmp_path, "works"))
    with pytest.raises(DemoError, match="could not be saved") as caught:
        arena.threads_to_use(REQUEST, pair)
    assert attempts() >= 1, "the smoke test did not even run"
    assert str(tmp_path) not in str(caught.value)


def test_a_python_error_in_the_smoke_test_leaves_the_configuration_unproven(tmp_path, presets, attempts):
    arena, pair = arena_with(tmp_path, presets, guard_on(tmp_path, "python_error"))
    with pytest.raises(DemoError, match="ValueError: a bug in the smoke test"):
        arena.threads_to_use(REQUEST, pair)
    assert arena.guard.record.get(NativeConfig(str(pair.main), "main", 1)) is None  # nothing recorded: tried again later


def test_a_smoke_test_that_times_out_is_tried_again_and_never_recorded_as_a_crash(tmp_path, attempts):
    """A 300 s smoke test on a busy machine became a permanent "crashes" verdict."""
    guard = guard_on(tmp_path, "hangs_once", timeout_s=8)
    config = NativeConfig(str(tmp_path / "main"), "main", 1)
    guard.require([config])
    assert attempts() == 2
    assert guard.record.get(config)["status"] == WORKS


def test_a_stop_while_the_guard_proves_a_configuration_kills_its_child(tmp_path, attempts):
    """The guard used to pass no cancel: a Stop waited for the smoke test (up to 300 s)."""
    guard = guard_on(tmp_path, "hangs_once", timeout_s=20)
    stop = threading.Event()
    config = NativeConfig(str(tmp_path / "main"), "main", 1)
    threading.Thread(target=lambda: (wait_for(lambda: attempts() == 1), stop.set()), daemon=True).start()
    with pytest.raises(DemoError, match="Stopped"):
        guard.require([config], cancel=stop)
    assert guard.record.get(config) is None


def wait_for(condition, limit: int = 3000) -> None:
    import time

    for _ in range(limit):  # a hang guard, not a bound: the condition comes in milliseconds
        if condition():
            return
        time.sleep(0.01)


def test_two_records_of_one_cache_share_one_lock(tmp_path, monkeypatch):
    """Two SafetyRecords on one folder (the app's and the doctor's, say) each had their own lock:
    both read the file, each wrote back its own verdict, and one verdict was lost."""
    a, b = SafetyRecord(tmp_path, machine_key="m"), SafetyRecord(tmp_path, machine_key="m")
    a_reading, b_read = threading.Event(), threading.Event()
    real_read = SafetyRecord._read

    def read(self):
        data = real_read(self)
        if self is a and not a_reading.is_set():
            a_reading.set()
            b_read.wait(2)  # b reads now unless the lock keeps it out until a has written
        elif self is b:
            b_read.set()
        return data

    monkeypatch.setattr(SafetyRecord, "_read", read)
    one, two = NativeConfig("/x/one", "main", 1), NativeConfig("/x/two", "main", 1)
    writer = threading.Thread(target=a.put, args=(one, WORKS, "one works"))
    writer.start()
    a_reading.wait(5)
    b.put(two, WORKS, "two works")
    writer.join()
    assert {e["detail"] for e in real_read(a).values()} == {"one works", "two works"}


# -- every compile goes through the guard ---------------------------------------------------------

def test_the_three_way_race_never_compiles_a_configuration_recorded_as_crashing(tmp_path, presets, monkeypatch):
    """It called the pipeline cache directly with OpenVINO's default threads, even where the
    record said that configuration crashes this CPU."""
    monkeypatch.setattr(arena_module, "cpu_cores", lambda: 2)
    record = SafetyRecord(tmp_path, machine_key="test")
    for folder, role in (("/m", "main"), ("/d", "draft")):
        record.put(NativeConfig(folder, role, None), CRASHES, f"OpenVINO crashed (SIGFPE) running the {role}")
        record.put(NativeConfig(folder, role, 2), WORKS, "works")
    arena = fake_arena(presets, guard=NativeGuard(record, target=f"{STAND_INS}:python_error"))
    done = {e.side: e.result for e in three_way.run(arena, REQUEST) if isinstance(e, DoneEvent)}
    assert not any(r.error for r in done.values()), done
    assert {threads for _, _, threads, _ in arena.cache.calls} == {2}


def test_the_pipeline_cache_refuses_what_its_guard_did_not_prove(tmp_path, monkeypatch):
    """A Serve replica's cache (and the app's): 1 thread per side on 2 cores is the known SIGFPE
    configuration for f16 mains; the replica compiled it unproven."""
    from demo.core.settings import PipelineOptions
    from demo.engine import pipelines
    from demo.serve.worker import SideCache, side_key

    record = SafetyRecord(tmp_path, machine_key="test")
    record.put(NativeConfig("/m", "main", 1), CRASHES, "OpenVINO crashed (SIGFPE) running the f16 main with 1 thread")
    built = []
    monkeypatch.setattr(pipelines, "build_side", lambda *a, **k: built.append(a) or FakeRunner(BASELINE, [1]))
    cache = SideCache(BASELINE, budget=1 << 40, guard=NativeGuard(record, target=f"{STAND_INS}:python_error"))
    key = side_key(BASELINE, "/m", None, "draft", PipelineOptions(threads=1))
    with pytest.raises(DemoError, match="SIGFPE"):
        cache.get(key)
    assert built == []


def test_the_step_view_proves_the_draft_before_compiling_it(tmp_path, presets, monkeypatch):
    from demo.core.streaming import RunResult
    from demo.engine import steps

    record = SafetyRecord(tmp_path, machine_key="test")
    record.put(NativeConfig("/d", "draft", None), CRASHES, "OpenVINO crashed (SIGFPE) running the draft")
    arena = fake_arena(presets, guard=NativeGuard(record, target=f"{STAND_INS}:python_error"))
    compiled = []
    monkeypatch.setattr(steps, "proposer", lambda *a: compiled.append(a))
    with pytest.raises(DemoError, match="SIGFPE"):
        steps.for_race(arena, REQUEST, RunResult(SPECULATIVE, 0.0, 1.0), threading.Event())
    assert compiled == []
    assert arena.admission.state() == {"running": None, "waiting": 0}


# -- a Stop reaches the engine while nothing streams ---------------------------------------------

class Prefill:
    """A runner step that blocks like a long prefill: until the stop flag is set (a step-driven
    run sees it between two scheduler steps) or the test lets it go."""

    def __init__(self, stop: threading.Event):
        self.stop, self.entered = stop, threading.Event()

    def __call__(self, i: int) -> None:
        self.entered.set()
        self.stop.wait(20)  # a hang guard


def test_a_stop_during_a_prefill_reaches_the_race(tmp_path):
    """race() blocked on its queue until the first token: a web handler (closed only between two
    yields) could not be stopped during a prefill. Heartbeats give it those yields."""
    stop = threading.Event()
    prefill = {s: Prefill(stop) for s in SIDES}
    runners = {s: FakeRunner(s, [1] * 4, step=prefill[s], watch=stop) for s in SIDES}
    finished = threading.Event()
    events = race(runners, "p", SETTINGS, stop, on_finished=finished.set, heartbeat_s=0.05)
    started = set()
    for event in events:
        if isinstance(event, StartEvent):
            started.add(event.side)
        if event is HEARTBEAT and started == set(SIDES) and all(p.entered.is_set() for p in prefill.values()):
            break  # both sides in their prefill, nothing streamed: the visitor presses Stop
    events.close()
    assert stop.is_set() and finished.wait(60)
    assert all(r.after_stop <= 1 for r in runners.values())  # the step in flight, then nothing


def test_a_stop_while_a_lane_loads_runs_no_lane_after_it():
    """one_by_one blocked on its queue while a lane's pipelines loaded; once they had, the lane
    ran its prefill for nobody. Now the stream yields while the lane loads and a lane loaded
    after a Stop never runs."""
    stop, loading, release = threading.Event(), threading.Event(), threading.Event()
    runners = {"baseline": FakeRunner(BASELINE, [1] * 3), "draft": FakeRunner(SPECULATIVE, [2])}

    def slow_load(status):
        loading.set()
        release.wait(20)  # a compile cannot be interrupted: it ends when it ends
        return runners["baseline"]

    lanes = [("baseline", slow_load, SETTINGS), ("draft", lambda status: runners["draft"], SETTINGS)]
    finished = threading.Event()
    events = one_by_one(lanes, "p", stop, on_finished=finished.set, heartbeat_s=0.05)
    for event in events:
        if event is HEARTBEAT and loading.is_set():
            break
    events.close()
    assert stop.is_set()
    release.set()
    assert finished.wait(60)
    assert runners["baseline"].calls == runners["draft"].calls == 0


# -- alternating modes does not reload what is loaded ------------------------------------------

def test_one_side_of_a_loaded_pair_is_served_from_the_pair(monkeypatch):
    """A three-way lane (one side) after a fair run (the pair) compiled that side again, which
    evicted the pair, which the next fair run compiled again: a reload per request."""
    from demo.core.settings import PipelineOptions
    from demo.engine import pipelines

    built = []

    def build_pair(key, status):
        built.append(("pair", key.method))
        return {s: FakeRunner(s, [1]) for s in SIDES}

    def build_side(key, side, status, warmup=True):
        built.append((side, key.method))
        return FakeRunner(side, [1])

    monkeypatch.setattr(pipelines, "build_pair", build_pair)
    monkeypatch.setattr(pipelines, "build_side", build_side)
    cache = pipelines.PipelineCache(budget=1 << 40)
    options = PipelineOptions()
    pair = cache.get(Path("/m"), Path("/d"), "draft", options)  # a fair run
    key = cache.key(Path("/m"), Path("/d"), "draft", options)
    assert cache.get_side(key, BASELINE) is pair[BASELINE]   # the three-way's baseline and draft lanes
    assert cache.get_side(key, SPECULATIVE) is pair[SPECULATIVE]
    cache.get_side(cache.key(Path("/m"), None, "prompt_lookup", options), SPECULATIVE)  # its lookup lane
    assert cache.get(Path("/m"), Path("/d"), "draft", options) is pair  # the next fair run
    assert built == [("pair", "draft"), (SPECULATIVE, "prompt_lookup")]


def test_an_eagle3_head_is_proven_with_its_main_and_skipped_when_it_accepts_nothing(tmp_path, presets, attempts):
    """A head cannot run alone: its check runs it beside the main (the child is given both),
    and one that accepts none of its guesses is recorded and refused with a sentence, while the
    main alone stays usable (the classic draft and prompt lookup still race)."""
    arena, pair = arena_with(tmp_path, presets, guard_on(tmp_path, "head_accepts_nothing"))
    eagle = RaceRequest(prompt="hi", preset="smollm2-self-draft",
                        settings=GenerationSettings(max_new_tokens=8, assistant_tokens=3, method="eagle3"))
    configs = arena.native_configs(eagle, pair, 1)
    head = NativeConfig(str(pair.draft), "draft", 1, main=str(pair.main))
    assert head in configs and head.key != NativeConfig(str(pair.draft), "draft", 1).key
    with pytest.raises(DemoError, match="accepted none of its 12 guesses") as caught:
        arena.threads_to_use(eagle, pair)
    assert "\n" not in str(caught.value)
    assert arena.guard.record.get(head)["status"] == CRASHES
    assert arena.guard.record.get(NativeConfig(str(pair.main), "main", 1))["status"] == WORKS
