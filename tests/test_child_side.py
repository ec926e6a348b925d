"""Each side's pipeline in a child process (demo/engine/child_side.py), with real OpenVINO
inference on the SmolLM2 fixture: a Stop that lands inside a prefill, a Stop while decoding that
keeps the side loaded, a side that crashes, and a child that ends with the app.

What is judged is events (which chunks arrived, which processes live), never a wall-clock bound.
"""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import pytest

from demo.core.errors import DemoError
from demo.core.settings import JOB_TOKEN_BUDGET, GenerationSettings, PipelineOptions
from demo.core.streaming import BASELINE, SIDES, SPECULATIVE, ChunkEvent, DoneEvent, StartEvent
from demo.engine import child_side
from demo.engine.pipelines import PipelineCache
from demo.engine.race import race

SETTINGS = GenerationSettings(max_new_tokens=24, assistant_tokens=3)
PROMPT = "Write a Python function that checks whether a number is prime."
HANG_GUARD_S = 120


@pytest.fixture
def cache():
    cache = PipelineCache(side_builder=child_side.build_child_side, pair_builder=child_side.build_pair)
    yield cache
    cache.clear()


def pair(cache, ir: Path) -> dict:
    return cache.get(ir, ir, "draft", PipelineOptions(threads=1))


def pids(runners: dict) -> dict:
    return {side: r._child.pid for side, r in runners.items()}


def freezing_mid_answer(pid: int, then: Callable[[], object]) -> Callable:
    """A run_race on_event that freezes the child `pid` (SIGSTOP: a busy machine, or a hung
    native call, as the parent sees it) at the baseline's second chunk, then calls `then`."""
    seen = []

    def on_event(event) -> None:
        if isinstance(event, ChunkEvent) and event.side == BASELINE:
            seen.append(event)
            if len(seen) == 2:
                os.kill(pid, signal.SIGSTOP)
                then()
    return on_event


def run_race(runners, prompt, settings, stop=None, on_event=lambda e: None) -> dict:
    finished = threading.Event()
    results = {}
    for event in race(runners, prompt, settings, stop, on_finished=finished.set):
        on_event(event)
        if isinstance(event, DoneEvent):
            results[event.side] = event.result
    assert finished.wait(HANG_GUARD_S)  # both sides returned: the slot is given back
    return results


def long_prompt(runners) -> str:
    """About 4,000 tokens, the longest prompt one job may send with a few new tokens."""
    words = "The lighthouse keeper counted the waves and wrote each one down. " * 400
    tokens = runners[BASELINE].count_tokens(runners[BASELINE].template(words))
    keep = int(len(words) * 4000 / tokens)
    prompt = words[:keep]
    assert 3500 < runners[BASELINE].count_tokens(runners[BASELINE].template(prompt)) <= 4096
    assert 4096 * SETTINGS.max_new_tokens <= JOB_TOKEN_BUDGET
    return prompt


def test_a_stop_during_a_long_prefill_ends_both_sides_before_their_first_token(smollm2_ir, cache, monkeypatch):
    """In the app's own process a side inside generate() computes until its first token, whatever
    the Stop (OpenVINO GenAI calls the streamer only then). In a child, a Stop the side does not
    answer in time ends the child: no token ever arrives, and the slot is free."""
    monkeypatch.setattr(child_side, "STOP_GRACE_S", 0.2)  # well inside the prompt's reading on any CPU
    runners = pair(cache, smollm2_ir)
    before = pids(runners)
    prompt = long_prompt(runners)
    stop = threading.Event()
    chunks = []

    def on_event(event):
        if isinstance(event, StartEvent):
            stop.set()  # the visitor presses Stop as the side starts reading the prompt
        if isinstance(event, ChunkEvent):
            chunks.append(event)

    results = run_race(runners, prompt, SETTINGS, stop, on_event)
    assert chunks == [] and all(r.cancelled and not r.chunks and r.error is None for r in results.values())
    assert not any(r.alive() for r in runners.values())  # the CPU was given back by ending them

    # The next race loads both sides again and runs to its end.
    again = pair(cache, smollm2_ir)
    assert all(r.alive() for r in again.values()) and set(pids(again).values()).isdisjoint(before.values())
    results = run_race(again, PROMPT, SETTINGS)
    assert all(len(r.token_ids) == SETTINGS.max_new_tokens and not r.cancelled for r in results.values())


def test_a_stop_while_decoding_ends_the_run_within_a_step_and_keeps_the_side_loaded(smollm2_ir, cache):
    runners = pair(cache, smollm2_ir)
    before = pids(runners)
    stop = threading.Event()
    seen = {side: 0 for side in SIDES}

    def on_event(event):
        if isinstance(event, ChunkEvent):
            seen[event.side] += 1
            if all(n >= 2 for n in seen.values()):
                stop.set()

    settings = GenerationSettings(max_new_tokens=400, assistant_tokens=3)
    results = run_race(runners, "Write a long story about a lighthouse keeper.", settings, stop, on_event)
    assert all(r.cancelled and 0 < len(r.token_ids) < 400 for r in results.values())
    assert pids(pair(cache, smollm2_ir)) == before and all(r.alive() for r in runners.values())
    # The same children run the next race, greedy, to the same answer on both sides.
    results = run_race(runners, PROMPT, SETTINGS)
    assert results[BASELINE].text == results[SPECULATIVE].text and results[BASELINE].text.strip()


def test_a_side_that_crashes_ends_with_a_sentence_and_is_loaded_again(smollm2_ir, cache):
    runners = pair(cache, smollm2_ir)
    victim = runners[SPECULATIVE]._child.pid

    def on_event(event):
        if isinstance(event, ChunkEvent) and event.side == SPECULATIVE:
            try:
                os.kill(victim, signal.SIGSEGV)  # as a native fault inside OpenVINO would
            except ProcessLookupError:
                pass

    settings = GenerationSettings(max_new_tokens=200, assistant_tokens=3)
    results = run_race(runners, PROMPT, settings, on_event=on_event)
    assert results[SPECULATIVE].error.startswith("OpenVINO crashed (SIGSEGV")
    assert "in the speculative pipeline; the next run loads it again" in results[SPECULATIVE].error
    assert results[BASELINE].error is None and len(results[BASELINE].token_ids) == 200  # the other side ran on
    messages = []
    again = cache.get(smollm2_ir, smollm2_ir, "draft", PipelineOptions(threads=1), status=messages.append)
    assert again[SPECULATIVE]._child.pid != victim and again[BASELINE] is runners[BASELINE]
    assert "loading the speculative pipeline again (a Stop or a crash ended its last run)" in messages
    assert all(not r.error for r in run_race(again, PROMPT, SETTINGS).values())


def test_evicting_a_pair_ends_its_children(smollm2_ir, tmp_path):
    cache = PipelineCache(max_pairs=1, side_builder=child_side.build_child_side, pair_builder=child_side.build_pair)
    try:
        first = pair(cache, smollm2_ir)
        assert cache.loaded_bytes() > sum(r.resident_bytes() for r in first.values()) > 0
        other = cache.get(smollm2_ir, None, "prompt_lookup", PipelineOptions(threads=1))
        assert not any(r.alive() for r in first.values()) and all(r.alive() for r in other.values())
    finally:
        cache.clear()


CHILD_OF_A_DYING_APP = """
import sys, threading
from pathlib import Path
from demo.core.settings import PipelineOptions
from demo.engine import child_side
from demo.engine.pipelines import PipelineCache

def load():  # in a thread that ends, as a request's thread does
    runners = cache.get(Path(sys.argv[1]), None, "prompt_lookup", PipelineOptions(threads=1))
    print(runners["baseline"]._child.pid, flush=True)

cache = PipelineCache(side_builder=child_side.build_child_side, pair_builder=child_side.build_pair)
t = threading.Thread(target=load); t.start(); t.join()
threading.Event().wait()
"""


def test_a_side_outlives_the_thread_that_loaded_it_and_ends_with_the_app(smollm2_ir):
    app = subprocess.Popen([sys.executable, "-c", CHILD_OF_A_DYING_APP, str(smollm2_ir)], stdout=subprocess.PIPE,
                           cwd=str(child_side.isolation.ROOT), text=True)
    try:
        side = int(app.stdout.readline())
        time.sleep(1)
        assert _alive(side)  # the loading thread is gone; the side stays
    finally:
        app.kill()
        app.wait()
    deadline = time.monotonic() + HANG_GUARD_S
    while _alive(side) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(side)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


def test_a_stop_in_a_long_prefill_through_the_page_frees_the_machine_for_the_next_visitor(running_app, monkeypatch):
    """As a stranger would: a 4,000-token race, Stop pressed while both sides read the prompt, and
    another visitor waiting. The other race runs to its end, and the first race's children were
    ended (a prefill run to its first token would have left them alive: they answer a Stop between
    tokens)."""
    from gradio_client import Client

    from .test_bad_inputs import race_args
    from .test_visitors import wait_for

    monkeypatch.setattr(child_side, "STOP_GRACE_S", 0.2)
    arena = running_app.arena
    hog, other = Client(running_app.local_url, verbose=False), Client(running_app.local_url, verbose=False)
    prompt = "ok. " * 1990  # about 4,000 tokens in the page's 16,000 characters

    def reading() -> list:
        """The children whose run is in flight now (each holds its side's lock from its prompt on)."""
        sides = [r for _, runners in arena.cache._pairs.items() for r in runners.values()]
        return [r for r in sides if isinstance(r, child_side.ChildSide) and r._lock.locked()]

    first = hog.submit(*race_args(prompt=prompt, max_new_tokens=500), api_name="/race")
    wait_for(lambda: len(reading()) == 2, "both sides reading the long prompt")
    cut = reading()
    admitted = other.submit(*race_args(max_new_tokens=16), api_name="/race")
    wait_for(lambda: arena.admission.state()["waiting"] == 1, "the other visitor's race in line")
    first.cancel()
    admitted.result(timeout=HANG_GUARD_S)
    assert 'data-tokens="16"' in admitted.outputs()[-1][3]
    assert not any(r.alive() for r in cut)  # the prefill was cut, not run to its first token


def test_the_sides_prompt_checks_share_one_tokenizer_so_a_side_loaded_again_adds_no_threads(smollm2_ir):
    """Every side's prompt checks for one model folder use one tokenizer: each OpenVINO
    tokenizer keeps 4 native threads, and a side loaded again after a Stop or a crash used to
    make a new one (the soak's thread check caught it under load)."""
    from demo.engine.pipelines import PairKey, PromptChecks
    from lab.soak import native_threads

    key = PairKey(str(smollm2_ir), str(smollm2_ir), "draft", PipelineOptions(threads=1))
    first = PromptChecks(key, BASELINE)
    first.count_tokens("warm the tokenizer's threads")
    before = native_threads()
    again = [PromptChecks(key, side) for side in (SPECULATIVE, BASELINE, SPECULATIVE)]
    for checks in again:
        checks.count_tokens("a prompt")
    assert all(checks.tokenizer is first.tokenizer for checks in again)
    assert native_threads() == before


def test_a_side_stopped_mid_step_is_waited_for_not_killed_however_slow_the_step(smollm2_ir, cache, monkeypatch):
    # A busy machine, made certain: the baseline's child is frozen (SIGSTOP) mid-answer as Stop is
    # pressed, for ten times the stop grace, then let go. A side that is decoding answers a Stop
    # after its step in flight; it is not killed for a slow step (the next visitor would wait for
    # it to load again), so the same child is loaded afterwards. Judged by what happened to the
    # child, not by when anything arrived.
    monkeypatch.setattr(child_side, "STOP_GRACE_S", 0.2)
    runners = pair(cache, smollm2_ir)
    before = pids(runners)
    frozen = runners[BASELINE]._child.pid
    stop = threading.Event()
    thaw = threading.Timer(10 * child_side.STOP_GRACE_S, lambda: os.kill(frozen, signal.SIGCONT))
    on_event = freezing_mid_answer(frozen, then=lambda: (stop.set(), thaw.start()))
    settings = GenerationSettings(max_new_tokens=200, assistant_tokens=3)
    try:
        results = run_race(runners, "Write a long story about a lighthouse keeper.", settings, stop, on_event)
    finally:
        thaw.cancel()
        try:
            os.kill(frozen, signal.SIGCONT)  # never leave a child stopped, whatever failed
        except ProcessLookupError:
            pass  # killed: what the assertions below report
    assert stop.is_set(), "the child was never frozen as Stop was pressed"
    assert results[BASELINE].cancelled and results[BASELINE].error is None
    assert runners[BASELINE].alive() and pids(pair(cache, smollm2_ir)) == before


def test_a_side_that_stops_answering_ends_at_its_deadline_with_a_sentence_and_frees_the_machine(smollm2_ir, cache,
                                                                                                 monkeypatch):
    # A child frozen mid-decode (SIGSTOP: as a hung native call looks from the parent). The
    # step deadline here is 5 s (25 of SmolLM2's ~15 ms steps is under it, and a step of the side
    # left running stays well inside it on a busy machine: at 0.5 s one did not); the default is 10 s.
    monkeypatch.setattr(child_side, "STEP_FLOOR_S", 5.0)
    runners = pair(cache, smollm2_ir)
    frozen = runners[BASELINE]._child.pid
    # Without a deadline the race would wait for ever: the frozen child is ended after a hang
    # guard, so the test fails (a crash's sentence) instead of hanging.
    on_event = freezing_mid_answer(frozen, then=lambda: guard.start())

    def end_it() -> None:
        if runners[BASELINE].alive():
            runners[BASELINE]._kill()

    guard = threading.Timer(HANG_GUARD_S / 4, end_it)
    settings = GenerationSettings(max_new_tokens=200, assistant_tokens=3)
    try:
        results = run_race(runners, "Write a long story about a lighthouse keeper.", settings, on_event=on_event)
    finally:
        guard.cancel()
    assert "stopped answering" in results[BASELINE].error and "next run loads it again" in results[BASELINE].error
    assert not runners[BASELINE].alive()  # killed: its CPU and memory are free
    assert results[SPECULATIVE].error is None and len(results[SPECULATIVE].token_ids) > 0


def test_a_load_past_its_deadline_ends_the_child_with_a_sentence(smollm2_ir, monkeypatch):
    monkeypatch.setattr(child_side, "LOAD_DEADLINE_S", 0.0)  # no load finishes in no time
    from demo.engine.pipelines import PairKey

    key = PairKey(str(smollm2_ir), str(smollm2_ir), "draft", PipelineOptions(threads=1))
    side = child_side.ChildSide(key, BASELINE)
    with pytest.raises(DemoError, match="took longer than 0 s, so it was stopped"):
        side.wait_ready()
    assert not side.alive()
