"""A job waiting in line hears its cancel (demo.engine.waiting), and the arena's table of
prepared pairs can be read while another thread prepares (Arena.needs_operator).

On fake runners and a fake pipeline cache: what is judged is which events happened and
in what order (did the waiting stream yield, did the job leave the line, did anything
load or run), never how long something took.
"""

import threading
import time
from pathlib import Path
from types import SimpleNamespace

from demo.core.settings import GenerationSettings
from demo.core.streaming import BASELINE, HEARTBEAT, SPECULATIVE, StatusEvent
from demo.engine import arena as arena_module
from demo.engine import waiting
from demo.engine.arena import Arena, RaceRequest

from .fakes import FakeRunner

HANG_GUARD_S = 10  # only a hang reaches it; the heartbeat is 0.2 s
PRESET = "smollm2-self-draft"


class SpyCache:
    """Stands for the pipeline cache: records every load, hands out fake runners that record every run."""

    def __init__(self):
        self.loads = []
        self.runners = []

    def get(self, main, draft, method, options, status=lambda m: None):
        self.loads.append(method)
        runners = {BASELINE: FakeRunner(BASELINE, [1] * 4), SPECULATIVE: FakeRunner(SPECULATIVE, [2, 2])}
        self.runners.extend(runners.values())
        return runners


def spy_arena(presets) -> Arena:
    arena = Arena(presets, store=SimpleNamespace(cache_dir=Path("/nonexistent")))
    arena.cache = SpyCache()
    pair = SimpleNamespace(main=Path("/m"), draft=Path("/d"), main_format="gguf", draft_format="gguf",
                           baseline=None)
    arena.prepare = lambda *a, **k: pair
    arena.prepared = lambda request: pair
    arena.threads_to_use = lambda *a, **k: 1
    return arena


def until(condition, what: str):
    deadline = time.monotonic() + HANG_GUARD_S
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)


def test_a_cancel_reaches_a_job_waiting_in_line_and_it_never_runs(presets):
    arena = spy_arena(presets)
    holder = arena.admission.enter("someone else's race")
    events = arena.run(RaceRequest(prompt="hello", preset=PRESET, settings=GenerationSettings(max_new_tokens=8)))
    first = next(events)
    assert isinstance(first, StatusEvent) and "1 run ahead of you" in first.message
    assert arena.admission.state() == {"running": "someone else's race", "waiting": 1}

    # As Gradio does it: next() runs in a worker thread, and a cancel can close the stream
    # only once that next() has returned. Nothing changes in the line meanwhile, so only
    # a heartbeat lets it return.
    returned = threading.Event()
    got = []
    threading.Thread(target=lambda: (got.append(next(events)), returned.set()), daemon=True).start()
    assert returned.wait(HANG_GUARD_S), "the waiting stream yielded nothing while its place stayed the same"
    assert isinstance(got[0], StatusEvent) and "1 run ahead of you" in got[0].message  # nothing new to show
    assert arena.admission.state()["waiting"] == 1  # the heartbeat came while the job still waited
    events.close()  # the cancel

    until(lambda: arena.admission.state()["waiting"] == 0, "the cancelled job leaving the line")
    holder.release()
    nxt = arena.admission.enter("the next visitor", timeout_s=HANG_GUARD_S)  # the slot is free at once
    nxt.release()
    assert arena.cache.loads == [] and arena.cache.runners == []  # nothing loaded, no prefill, no step


def test_heartbeats_repeat_the_last_message_and_the_result_still_arrives():
    release = threading.Event()

    def work(status):
        status("waiting for the machine: 1 run ahead of you")
        release.wait(HANG_GUARD_S)
        return "runners"

    out = []
    stream = waiting.with_last_message(waiting.status_stream(work, out, heartbeat_s=0.01), "getting ready")
    seen = [next(stream) for _ in range(3)]  # the message, then heartbeats while nothing changes
    assert seen == ["waiting for the machine: 1 run ahead of you"] * 3
    release.set()
    list(stream)
    assert out == ["runners"]


def test_a_stream_closed_while_waiting_hands_the_result_back():
    release, given_back = threading.Event(), []

    def work(status):
        release.wait(HANG_GUARD_S)
        return "a ticket"

    stream = waiting.status_stream(work, [], on_abandoned=given_back.append, heartbeat_s=0.01)
    assert next(stream) is HEARTBEAT  # no message yet
    stream.close()
    release.set()
    until(lambda: given_back == ["a ticket"], "the abandoned result handed back")


def test_the_heartbeat_is_within_the_promise():
    # A cancel is heard within one heartbeat plus the admission's poll to leave the line.
    from demo.engine.admission import POLL_S

    assert waiting.HEARTBEAT_S + POLL_S <= 0.5


# -- needs_operator while another thread prepares -------------------------------------------

class MutatedMidway(dict):
    """The arena's table of prepared pairs, with a hook run after iteration has yielded its
    first key: the moment another thread's prepare lands, made certain."""

    hook = None

    def __iter__(self):
        for i, key in enumerate(super().__iter__()):
            yield key
            if i == 0 and self.hook is not None:
                hook, self.hook = self.hook, None
                hook()


def test_needs_operator_reads_the_prepared_pairs_while_a_prepare_adds_one(presets, monkeypatch):
    arena = Arena(presets, store=SimpleNamespace(cache_dir=Path("/nonexistent")))
    other = next(name for name in presets.presets if name != PRESET)
    arena._prepared = MutatedMidway({(other, None, None, None): "pair", (other, "int8", None, None): "pair"})
    monkeypatch.setattr(arena_module, "prepare_preset", lambda preset, *a, **k: f"{preset.name} pair")

    def another_visitor_prepares():
        preparer = threading.Thread(target=arena.prepare, args=(PRESET,), kwargs={"main_format": "gguf"}, daemon=True)
        preparer.start()
        # Unguarded, it adds its pair now; guarded, it waits for this read to end.
        preparer.join(0.5)
        arena.preparer = preparer

    arena._prepared.hook = another_visitor_prepares
    assert arena.needs_operator(PRESET) is None  # no "dictionary changed size during iteration"
    arena.preparer.join(HANG_GUARD_S)
    assert arena._prepared[(PRESET, "gguf", None, None)] == f"{PRESET} pair"

