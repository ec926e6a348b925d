"""Nothing OpenVINO does natively can take the app down.

Children that really die (SIGFPE from os.kill, SIGSEGV through ctypes, a hang) stand in for
OpenVINO's CPU plugin crashing on a configuration (tests/native_stand_ins.py); the rest is
real OpenVINO on the SmolLM2 fixture. Checked: the crash becomes one sentence, the app keeps
racing with another thread count, the configuration is recorded for this machine and never
tried again (not by a race, not by calibration), an interrupted calibration resumes from its
saved stages, and the page shows the sentence.
"""

import json
import os
import threading
from pathlib import Path

import pytest

from demo.calibrate import calibration
from demo.calibrate.plan import Plan
from demo.core import isolation
from demo.core.errors import DemoError
from demo.core.quiet_log import QuietLog
from demo.engine import arena as arena_module, request as request_module
from demo.engine.native_guard import CRASHES, NativeConfig, NativeGuard, SafetyRecord
from demo.models import calibration_store

from .conftest import SMOLLM2, _free_port

STAND_INS = "tests.native_stand_ins"
PROMPT = "Write a Python function that reverses a string."
# These calibrations are about crashes and resuming, not measuring: every stage of the full
# plan runs, each on the fewest samples it takes (96 to 84 s for the longest test: a stage's
# cost is mostly its child process and its compiles).
QUICK = Plan("quick", repeats=2, draft_repeats=3, overhead_prompts=1, overhead_new_tokens=16, overhead_at_k1=False,
             plain_rounds=2, plain_prompts=1, plain_new_tokens=8)


# -- the child process ----------------------------------------------------------------

def test_the_smoke_test_runs_paged_attention_with_multi_token_verify_steps(smollm2_ir):
    """The guard proves the shapes the app's process runs: OpenVINO's own per-step token
    counts show steps of more than one token (a verify), which a one-token-a-step stateful
    check never runs."""
    result = isolation.run("demo.engine.native_guard:smoke_test", {"folder": str(smollm2_ir), "threads": 1},
                           what="the smoke test", timeout_s=300)
    assert result["largest_step"] > 1
    assert result["ms_per_token"] > 0


def test_the_smoke_test_of_a_stateful_baseline_compiles_it_as_the_arena_does(smollm2_ir, monkeypatch):
    """A baseline calibrated onto the stateful backend is its own configuration: the guard's
    child builds it with ATTENTION_BACKEND=SDPA and no scheduler, and it decodes a token a step."""
    import openvino_genai

    from demo.engine import native_guard

    seen, real = [], openvino_genai.LLMPipeline
    monkeypatch.setattr(openvino_genai, "LLMPipeline", lambda *a, **kw: seen.append(kw) or real(*a, **kw))
    result = native_guard.smoke_test({"folder": str(smollm2_ir), "threads": 1, "attention": "SDPA"}, lambda m: None)
    [kw] = seen
    assert kw.get("ATTENTION_BACKEND") == "SDPA" and "scheduler_config" not in kw and "prompt_lookup" not in kw
    assert result["largest_step"] == 1 and result["ms_per_token"] > 0
    config = native_guard.NativeConfig(str(smollm2_ir), "main", 1, attention="SDPA")
    assert config.key.endswith("|SDPA") and "stateful backend" in config.describe()



def test_a_child_returns_its_answer_and_its_messages():
    messages = []
    assert isolation.run(f"{STAND_INS}:answer", {"x": 21}, what="x", on_message=messages.append) == {"doubled": 42}
    assert messages == ["working"]


@pytest.mark.parametrize("target, how", [("segfault", "SIGSEGV"), ("sleep_forever", "no answer within 3 s")])
def test_a_child_that_dies_or_hangs_becomes_one_sentence(target, how):
    with pytest.raises(isolation.NativeCrash) as caught:
        isolation.run(f"{STAND_INS}:{target}", {}, what="running the test stand-in", timeout_s=3)
    assert str(caught.value).startswith(f"OpenVINO crashed ({how}")
    assert str(caught.value).endswith("running the test stand-in on this CPU")


def test_background_work_yields_to_the_app_in_its_own_session_too():
    """A conversion (nice > 0) is a session of its own: where the kernel groups sessions
    (autogroups), its session must be niced too, or it takes a core from a race all the same."""
    normal = isolation.run(f"{STAND_INS}:priority", {}, what="x")
    background = isolation.run(f"{STAND_INS}:priority", {}, what="x", nice=19)
    assert normal["session_leader"] and background["session_leader"]
    assert (normal["nice"], background["nice"]) == (os.nice(0), 19)
    if not background["autogroup"]:
        pytest.skip("this kernel has no autogroups (/proc/self/autogroup): nice alone ranks the child")
    assert normal["autogroup"].endswith(" nice 0") and background["autogroup"].endswith(" nice 19")


def test_a_python_error_in_the_child_is_not_called_a_crash():
    with pytest.raises(isolation.ChildFailed, match="ValueError: a Python error in the child"):
        isolation.run(f"{STAND_INS}:fail", {}, what="x")


def test_cancel_kills_the_child_at_once():
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    with pytest.raises(DemoError, match="Stopped"):
        isolation.run(f"{STAND_INS}:sleep_forever", {}, what="x", cancel=stop, timeout_s=60)


def test_a_child_dies_with_its_parent(tmp_path):
    """An app killed with -9 leaves no measurement running on a core."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = ("import sys; from demo.core import isolation\n"
              f"isolation.run('{STAND_INS}:pid_then_sleep', {{}}, what='x', "
              "on_message=lambda m: print(m, flush=True))\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              cwd=str(isolation.ROOT))
    child = int(parent.stdout.readline())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    for _ in range(100):  # a hang guard: the kernel kills it at once
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        if Path(f"/proc/{child}/stat").read_text().split()[2] == "Z":
            return  # dead, waiting to be reaped by init
        time.sleep(0.1)
    os.kill(child, signal.SIGKILL)
    pytest.fail("the child outlived its parent by 10 s")


# -- the app: a crashing configuration is skipped, recorded, never tried again -----------

@pytest.fixture
def own_cache(tmp_path, session_store, smollm2_ir):
    """A cache of its own (so its own safety record) sharing the prepared models."""
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "models").symlink_to((session_store.cache_dir / "models").resolve(), target_is_directory=True)
    return cache


@pytest.fixture
def crash_one_thread(monkeypatch, tmp_path, smollm2_ir):
    """The SmolLM2 gguf IR with one thread raises SIGFPE in any child that compiles it."""
    log = tmp_path / "crashes.log"
    monkeypatch.setenv("CRASH_ON", f"{smollm2_ir.name}|1")
    monkeypatch.setenv("CRASH_LOG", str(log))
    for module in (arena_module, request_module):  # the race's even split: 1 thread each
        monkeypatch.setattr(module, "cpu_cores", lambda: 2)
    return lambda: log.read_text().splitlines() if log.exists() else []


def arena_on(cache: Path, presets):
    from demo.engine.arena import Arena
    from demo.engine.pipelines import PipelineCache
    from demo.models.sources import ModelStore

    store = ModelStore(cache)
    guard = NativeGuard(SafetyRecord(cache), target=f"{STAND_INS}:smoke_test")
    return Arena(presets.model_copy(update={"default": SMOLLM2}), store, PipelineCache(max_pairs=1), guard=guard)


def race(arena):
    from demo.core.settings import GenerationSettings
    from demo.core.streaming import DoneEvent
    from demo.engine.arena import RaceRequest

    request = RaceRequest(prompt=PROMPT, settings=GenerationSettings(max_new_tokens=16, assistant_tokens=3))
    done = {e.side: e.result for e in arena.run(request) if isinstance(e, DoneEvent)}
    return request, done


SENTENCE = "OpenVINO crashed (SIGFPE) running the gguf main with 1 thread on this CPU; that configuration is skipped"


def test_a_race_survives_a_crashing_thread_count_and_a_restart_never_tries_it_again(own_cache, presets,
                                                                                    crash_one_thread):
    arena = arena_on(own_cache, presets)
    request, done = race(arena)
    assert all(r.error is None and len(r.token_ids) == 16 for r in done.values()), done
    assert crash_one_thread() == [f"{Path(arena.prepared(request).main).name}|1"]
    assert SENTENCE in arena.skipped_configurations()
    how = arena.summarize(done, request).how
    assert "2 threads each" in how and "that split was skipped" in how
    arena.cache.clear()

    again = arena_on(own_cache, presets)  # a restart: the record is read, nothing crashes again
    request, done = race(again)
    assert all(r.error is None for r in done.values())
    assert len(crash_one_thread()) == 1
    record = SafetyRecord(own_cache)
    assert record.unusable(NativeConfig(str(again.prepared(request).main), "main", 1)) == SENTENCE
    again.cache.clear()


def test_the_page_says_what_was_skipped(own_cache, presets, crash_one_thread):
    from .test_browser import CHROMIUM, CHROMIUM_ARGS, sync_api
    import app

    arena = arena_on(own_cache, presets)
    race(arena)  # records the crash, as a first launch would
    arena.cache.clear()
    demo = app.make_demo(preset=SMOLLM2, cache_dir=own_cache, warm=True)
    app.launch(demo, port=_free_port(), prevent_thread_lock=True, quiet=True)
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            page = browser.new_page()
            page.goto(demo.local_url)
            page.wait_for_function("() => (document.querySelector('#startup') || {}).innerText?.includes('Ready')",
                                   timeout=300_000)
            assert SENTENCE in page.inner_text("#startup")
            browser.close()
    finally:
        demo.close()
        demo.arena.cache.clear()


# -- calibration ------------------------------------------------------------------------

def crash_int4_with_race_threads(store, spec, monkeypatch, tmp_path) -> tuple[Path, Path]:
    """CRASH_ON the spec's int4_sym folder with the race's threads: (that folder, the crash log)."""
    from demo.core.settings import race_threads

    int4 = store.ready_path(spec, "int4_sym") or store.prepare(spec, weight_format="int4_sym").path
    log = tmp_path / "crashes.log"
    monkeypatch.setenv("CRASH_ON", f"{int4.name}|{race_threads()}")
    monkeypatch.setenv("CRASH_LOG", str(log))
    return int4, log


def interrupt_at(prefix: str):
    """A calibration slot that stops the calibration at the first stage whose name starts so."""
    def slot(what):
        if what.startswith(prefix):
            raise DemoError("interrupted by the test")
        from contextlib import nullcontext
        return nullcontext()
    return slot


def test_calibration_skips_a_crashing_format_and_resumes_after_an_interruption(own_cache, presets, monkeypatch,
                                                                               tmp_path, smollm2_ir):
    """int4_sym as the main with the race's threads crashes (a real SIGFPE in the stage's
    child): calibration records it, leaves int4_sym out, and picks gguf. Interrupted before
    its last stage, a second run reuses every stage measured before."""
    from demo.core.settings import race_threads
    from demo.models.sources import ModelStore

    store = ModelStore(own_cache)
    preset = presets.get(SMOLLM2)
    int4, log = crash_int4_with_race_threads(store, preset.main, monkeypatch, tmp_path)
    # About crashes and resuming, not pruning: int4_sym must reach its crashing race curve
    # however fast or slow this machine measures it.
    monkeypatch.setenv("NO_PRUNING", "1")
    kw = dict(main_formats=["gguf", "int4_sym"], draft_formats=["gguf"], k_max=2, max_new_tokens=16,
              prompts=[PROMPT], stages_module=STAND_INS, plan=QUICK)

    with pytest.raises(DemoError, match="interrupted by the test"):
        calibration.calibrate(preset, store, slot=interrupt_at("timing a real speculative pipeline"), **kw)
    assert log.read_text().splitlines() == [f"{int4.name}|{race_threads()}"]
    saved = json.loads(calibration_store.stages_path(store, preset.name, calibration_store.fingerprint(preset, store)).read_text())
    # The main alone is timed before any speculative pipeline (with race threads only when both
    # formats came close with the whole machine: cost_model.race_contenders).
    assert set(saved["stages"]) - {"plain:race"} == {"drafts", "main:gguf", "main:int4_sym", "plain:fair"}

    messages = []
    result = calibration.calibrate(preset, store, report=messages.append, **kw)
    reused = [m for m in messages if m.endswith("measured before this restart, reused")]
    assert len(reused) == len(saved["stages"]), messages
    assert len(log.read_text().splitlines()) == 1, "a recorded crash was tried again"
    assert {c.main_format for c in result.candidates} == {"gguf"}
    assert "int4_sym" not in result.plain["race"].rates  # its race threads crash: never timed alone either
    assert result.choice["race"].main_format == result.choice["fair"].main_format == "gguf"
    assert any("int4_sym main with" in s and "SIGFPE" in s for s in result.skipped), result.skipped
    assert not calibration_store.stages_path(store, preset.name, calibration_store.fingerprint(preset, store)).exists()


def test_a_draft_format_that_crashes_leaves_the_others_measured_in_turn(own_cache, presets, monkeypatch, tmp_path,
                                                                         smollm2_ir):
    """The draft formats share one stage (measured in turn): int4_sym as the draft with the
    race's threads crashes (a real SIGFPE); the stage is recorded, runs again without that
    configuration, and keeps every other measurement."""
    from demo.core.settings import race_threads
    from demo.models.sources import ModelStore

    store = ModelStore(own_cache)
    preset = presets.get(SMOLLM2)
    int4, log = crash_int4_with_race_threads(store, preset.draft, monkeypatch, tmp_path)
    with pytest.raises(DemoError, match="interrupted by the test"):
        calibration.calibrate(preset, store, slot=interrupt_at("measuring the main model"), main_formats=["gguf"],
                              draft_formats=["gguf", "int4_sym"],
                              k_max=2, max_new_tokens=16, prompts=[PROMPT], stages_module=STAND_INS, plan=QUICK)
    assert log.read_text().splitlines() == [f"{int4.name}|{race_threads()}"]
    saved = json.loads(calibration_store.stages_path(store, preset.name, calibration_store.fingerprint(preset, store)).read_text())
    steps = {fmt: set(m["step_s"]) for fmt, m in saved["stages"]["drafts"].items()}
    assert steps == {"gguf": {"fair", "race"}, "int4_sym": {"fair"}}
    assert SafetyRecord(own_cache).get(NativeConfig(str(int4), "draft", race_threads()))["status"] == CRASHES


def test_without_the_original_weights_running_calibration_says_quality_went_unread(own_cache, presets, monkeypatch,
                                                                                    tmp_path, smollm2_ir):
    """The GGUF main with OpenVINO's default threads crashes (a real SIGFPE): int4_sym's
    quality cannot be read against it, and calibration says so instead of passing it silently."""
    from demo.models.sources import ModelStore

    store = ModelStore(own_cache)
    preset = presets.get(SMOLLM2)
    monkeypatch.setenv("CRASH_ON", f"{smollm2_ir.name}|default")
    monkeypatch.setenv("CRASH_LOG", str(tmp_path / "crashes.log"))
    monkeypatch.setenv("NO_PRUNING", "1")
    messages = []
    with pytest.raises(DemoError, match="interrupted by the test"):
        calibration.calibrate(preset, store, slot=interrupt_at("timing the main model alone"), report=messages.append,
                              main_formats=["gguf", "int4_sym"], draft_formats=["int4_sym"], k_max=2,
                              max_new_tokens=16, prompts=[PROMPT], stages_module=STAND_INS, plan=QUICK)
    assert "the original GGUF main did not run here: no format's quality was read against it" in messages, messages


# -- the terminal log -------------------------------------------------------------------

def test_the_log_prints_progress_sparingly_and_each_tasks_duration():
    lines, now = [], [0.0]
    log = QuietLog(lines.append, interval_s=5.0, clock=lambda: now[0])
    for i in range(301):  # three lines per percent over 30 s, as the Q4_0 rewrite printed
        now[0] = i * 0.1
        log(f"rewriting draft model tensors as Q4_0: {i // 3}%")
        log(f"assembling main model from 22 packages: {i // 3}%")  # a second task at the same time
    for k in range(13):  # the same line over 6 s, past the progress interval: still printed once
        now[0] = 30.0 + 0.5 * k
        log("unpacking main model GGUF weights to f16…")
    for k in range(40):  # two tasks taking turns, one waiting for the other's prepare: each line once
        now[0] = 36.5 + 0.05 * k
        log("waiting for another prepare of the draft model…" if k % 2 else "assembling draft model from 6 packages")
    now[0] = 40.0
    log("loading the baseline pipeline (main model)")
    now[0] = 74.0
    log("fastest main alone: int4_sym at 17.1 tok/s")
    log("loading the baseline pipeline (main model)")  # the reload after calibration is shown again
    now[0] = 80.0
    log("ready")
    assert lines[:2] == ["rewriting draft model tensors as Q4_0: 0%", "assembling main model from 22 packages: 0%"]
    assert "rewriting draft model tensors as Q4_0: 100% (30.0 s)" in lines
    assert "assembling main model from 22 packages: 100% (30.0 s)" in lines
    assert lines[-10:] == ["unpacking main model GGUF weights to f16…",
                          "unpacking main model GGUF weights to f16: done in 6.5 s",
                          "assembling draft model from 6 packages",
                          "waiting for another prepare of the draft model…",  # a wait is never timed
                          "loading the baseline pipeline (main model)",
                          "loading the baseline pipeline (main model): done in 34.0 s",
                          "fastest main alone: int4_sym at 17.1 tok/s",
                          "loading the baseline pipeline (main model)",
                          "loading the baseline pipeline (main model): done in 6.0 s",
                          "ready"]
    assert len(lines) <= 25, lines
    assert len(lines) - len(set(lines)) == 1, "only the reload's line may appear twice"


def logged(steps: list) -> list[str]:
    """What a QuietLog writes for [(seconds after start, message)], said in order by one thread."""
    lines, now = [], [0.0]
    log = QuietLog(lines.append, clock=lambda: now[0])
    for t, message in steps:
        now[0] = t
        log(message)
    return lines


def test_the_log_times_each_stream_on_its_own():
    """Calibration's steps run beside the pair's load: a calibration line does not end the
    load's step, so each duration belongs to the step that took it."""
    lines = logged([(0.0, "warming up both pipelines"),
                    (1.0, "calibrating: unpacking main model GGUF weights to f16"),
                    (18.0, "calibrating: measuring the draft model (gguf, fair threads)"),
                    (20.0, "ready for races")])
    assert lines == ["warming up both pipelines",
                     "calibrating: unpacking main model GGUF weights to f16",
                     "calibrating: unpacking main model GGUF weights to f16: done in 17.0 s",
                     "calibrating: measuring the draft model (gguf, fair threads)",
                     "warming up both pipelines: done in 20.0 s",
                     "ready for races"]


def test_a_step_saying_its_line_again_while_it_runs_is_one_step():
    """A conversion reports its stage at its start and again at its end, a minute later, with
    another stream's lines between: one line, timed once when its stream moves on (a first
    launch printed each conversion twice, once after its own "done in")."""
    lines = logged([(0.0, "calibrating: unpacking and compressing draft model weights to int4_sym with NNCF"),
                    (30.0, "checking once that OpenVINO runs the gguf main with 1 thread on this CPU"),
                    (56.0, "calibrating: unpacking and compressing draft model weights to int4_sym with NNCF"),
                    (56.0, "calibrating: measuring the draft models"),
                    (56.0, "  the whole report: python -m demo.calibrate"),  # a summary's line: no task of its own
                    (58.0, "ready")])
    assert lines == ["calibrating: unpacking and compressing draft model weights to int4_sym with NNCF",
                     "checking once that OpenVINO runs the gguf main with 1 thread on this CPU",
                     "calibrating: unpacking and compressing draft model weights to int4_sym with NNCF: done in 56.0 s",
                     "calibrating: measuring the draft models", "  the whole report: python -m demo.calibrate",
                     "checking once that OpenVINO runs the gguf main with 1 thread on this CPU: done in 28.0 s",
                     "ready"]


def test_a_task_is_not_called_done_because_another_thread_began_one():
    """At launch the draft converts while the main model's check runs in another thread: the
    check's first line must not end the conversion ("converting …: done in 6.4 s" before its
    100% line, a stop measured), and each says its own duration."""
    from concurrent.futures import ThreadPoolExecutor

    lines, now = [], [0.0]
    log = QuietLog(lines.append, clock=lambda: now[0])
    draft, check, race = (ThreadPoolExecutor(max_workers=1) for _ in range(3))  # three threads, alive throughout

    def in_thread(thread, message: str, at: float) -> None:
        now[0] = at
        thread.submit(log, message).result()

    in_thread(draft, "converting draft model to OpenVINO IR…", 13.0)
    in_thread(check, "checking once that OpenVINO runs the gguf main with 1 thread on this CPU", 19.6)
    in_thread(race, "waiting for the run in progress to end, then loading the models", 20.9)
    in_thread(draft, "converting draft model to OpenVINO IR: 100%", 20.3)
    in_thread(check, "checking once that OpenVINO runs the gguf main with 1 thread on this CPU: 100%", 28.3)
    for thread in (draft, check, race):
        thread.shutdown()
    assert not [line for line in lines if "done in" in line], lines
    assert "converting draft model to OpenVINO IR: 100% (7.3 s)" in lines
    assert "checking once that OpenVINO runs the gguf main with 1 thread on this CPU: 100% (8.7 s)" in lines


def test_a_task_with_percentages_is_timed_once():
    """A step announced with "…" that then reports percentages says its duration once, with
    its 100% line, not again when another step begins."""
    lines = logged([(0.0, "converting main model to OpenVINO IR…"), (10.0, "converting main model to OpenVINO IR: 50%"),
                    (10.0, "rewriting draft model tensors as Q4_0: 0%"),
                    (20.0, "converting main model to OpenVINO IR: 100%")])
    assert lines == ["converting main model to OpenVINO IR…", "converting main model to OpenVINO IR: 50%",
                     "rewriting draft model tensors as Q4_0: 0%", "converting main model to OpenVINO IR: 100% (20.0 s)"]
