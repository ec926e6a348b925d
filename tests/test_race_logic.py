"""Fast tests of the pure logic: merging, stopping, replay, stats, verdicts, settings.

No OpenVINO: fake runners (tests/fakes.py). Orderings are made certain by runners that wait
for each other, stops are counted in steps, replay runs on a fake clock; wall-clock limits
appear only as generous hang guards.
"""

import threading
import time

import pytest

from demo.core.errors import UNEXPECTED, DemoError
from demo.core.metrics import acceptance_rate, equality_verdict, side_stats, speedup
from demo.core.settings import GenerationSettings, race_threads
from demo.core.streaming import (
    BASELINE, HEARTBEAT, SIDES, SPECULATIVE, Chunk, ChunkEvent, DoneEvent, IncrementalDetokenizer, RunResult, StartEvent,
)
from demo.engine.race import REPLAY_SLICE_S, fair, race, replay
from tests.fakes import FakeRunner

SETTINGS = GenerationSettings(max_new_tokens=16)
HANG_GUARD_S = 10.0  # only ever reached when something hangs; no assertion depends on speed


def collect(events):
    chunks = {BASELINE: [], SPECULATIVE: []}
    results = {}
    order = []
    for e in events:
        if isinstance(e, ChunkEvent):
            chunks[e.side].append(e.chunk)
            order.append(e.side)
        elif isinstance(e, DoneEvent):
            results[e.side] = e.result
    return chunks, results, order


def wait_for(event: threading.Event, what: str, timeout: float = HANG_GUARD_S) -> None:
    """A generous hang guard, never a measurement: on a working race this returns at once."""
    assert event.wait(timeout), f"{what} did not happen within {timeout} s"


def test_race_runs_both_sides_at_once():
    # Before its second step each side waits (up to 5 s) for the other side's first chunk.
    # Run at once, both first chunks therefore come before either side is done; run one
    # after the other, the first side gives up waiting and finishes before the second starts.
    first_out = {s: threading.Event() for s in SIDES}

    def step_for(side, other):
        def step(i):
            if i == 1:  # chunk 0 is out (on_chunk has returned): tell the other side, wait for it
                first_out[side].set()
                first_out[other].wait(5.0)
        return step

    runners = {
        BASELINE: FakeRunner(BASELINE, [1] * 4, step=step_for(BASELINE, SPECULATIVE)),
        SPECULATIVE: FakeRunner(SPECULATIVE, [1, 3, 3], step=step_for(SPECULATIVE, BASELINE)),
    }
    events = list(race(runners, "p", SETTINGS))
    first_done = next(i for i, e in enumerate(events) if isinstance(e, DoneEvent))
    before = {e.side for e in events[:first_done] if isinstance(e, ChunkEvent)}
    assert before == {BASELINE, SPECULATIVE}, "one side finished before the other streamed: not a race"
    chunks, results, _ = collect(events)
    assert [len(c.token_ids) for c in chunks[SPECULATIVE]] == [1, 3, 3] and len(chunks[BASELINE]) == 4
    assert set(results) == {BASELINE, SPECULATIVE} and not any(r.cancelled for r in results.values())


def test_slow_side_does_not_stall_fast_side():
    # The slow side holds its third step until the fast side has returned (up to 5 s). If
    # the fast side had to wait for the slow one (one serial loop advancing both), it could
    # not finish first and the slow side's third chunk would come before its last chunks.
    fast = FakeRunner(SPECULATIVE, [1, 3, 3, 3], delay_s=0.001)
    slow = FakeRunner(BASELINE, [1] * 10, step=lambda i: fast.finished.wait(5.0) if i == 2 else None)
    chunks, results, order = collect(race({BASELINE: slow, SPECULATIVE: fast}, "p", SETTINGS))
    assert sum(len(c.token_ids) for c in chunks[SPECULATIVE]) == 10 and len(chunks[BASELINE]) == 10
    third_slow = [i for i, side in enumerate(order) if side == BASELINE][2]
    last_fast = max(i for i, side in enumerate(order) if side == SPECULATIVE)
    assert last_fast < third_slow, order


def test_stop_cancels_both_sides_within_one_step():
    # Counted in steps, not seconds: after the stop flag is set, a side may finish the step
    # it is in (one chunk), and then generates nothing more.
    stop = threading.Event()
    runners = {s: FakeRunner(s, [1] * 300, delay_s=0.005, watch=stop) for s in SIDES}
    results = {}
    for e in race(runners, "p", SETTINGS, stop):
        if isinstance(e, ChunkEvent) and not stop.is_set() and e.chunk.token_ids[0] >= 5:
            stop.set()
        if isinstance(e, DoneEvent):
            results[e.side] = e.result
    assert set(results) == set(SIDES) and all(r.cancelled for r in results.values())
    after = {s: r.after_stop for s, r in runners.items()}
    assert all(n <= 1 for n in after.values()), f"chunks delivered after the stop: {after}"
    assert all(r.delivered < 300 for r in runners.values())


def test_closing_the_stream_returns_at_once_and_the_threads_end_by_themselves():
    # Closing runs on the web server's event loop, so it must not wait for a model step (here:
    # a step that lasts until the test opens `gate`). It sets the stop flag and returns; the
    # workers finish their step, see the flag, stop, and report through on_finished.
    gate = threading.Event()
    stop = threading.Event()
    finished = threading.Event()
    calls = []
    runners = {s: FakeRunner(s, [1] * 1000, step=lambda i: gate.wait(HANG_GUARD_S) if i == 0 else None,
                             watch=stop) for s in SIDES}

    def on_finished():
        calls.append(threading.current_thread().name)
        finished.set()

    stream = race(runners, "p", SETTINGS, stop, on_finished=on_finished)
    assert isinstance(next(stream), StartEvent)
    t0 = time.perf_counter()
    stream.close()  # what Gradio does when the visitor presses Stop or closes the tab
    took = time.perf_counter() - t0
    assert stop.is_set(), "closing the stream did not set the stop flag"
    # Both workers are still inside their first step: closing did not wait for them.
    assert not finished.is_set() and not any(r.finished.is_set() for r in runners.values())
    assert took < HANG_GUARD_S / 2  # hang guard only; the assertion above is the real check
    gate.set()
    wait_for(finished, "on_finished after both workers returned")
    assert all(r.finished.is_set() for r in runners.values())
    after = {s: r.after_stop for s, r in runners.items()}
    assert all(n <= 1 for n in after.values()), f"chunks delivered after the stop: {after}"
    for t in threading.enumerate():
        if t.name.startswith("race-"):
            t.join(HANG_GUARD_S)  # the test may join; the engine never does
            assert not t.is_alive()
    assert len(calls) == 1, "on_finished must run exactly once"


def test_on_finished_runs_once_after_a_normal_race_and_after_a_fair_run():
    for stream in (race, fair):
        calls = []
        done = threading.Event()
        runners = {s: FakeRunner(s, [1] * 3, delay_s=0.001) for s in SIDES}
        events = list(stream(runners, "p", SETTINGS, on_finished=lambda: (calls.append(1), done.set())))
        assert sum(isinstance(e, DoneEvent) for e in events) == 2
        wait_for(done, f"{stream.__name__}: on_finished")
        assert all(r.finished.is_set() for r in runners.values())
        time.sleep(0.02)
        assert calls == [1]


def test_start_event_comes_from_the_runner_not_from_the_thread_start():
    # A side's clock starts when its runner says generation began (e.g. after waiting for a
    # pipeline that a stopped run still holds), never when the worker thread started.
    class LateStart(FakeRunner):
        def run(self, prompt, settings, on_chunk, on_start=lambda t: None, stop=None):
            time.sleep(0.05)  # waiting for the pipeline lock
            self.reported = time.perf_counter()
            return super().run(prompt, settings, on_chunk, lambda t: on_start(self.reported))

    runners = {BASELINE: LateStart(BASELINE, [1] * 2, delay_s=0.001),
               SPECULATIVE: FakeRunner(SPECULATIVE, [2], delay_s=0.001)}
    events = list(race(runners, "p", SETTINGS))
    starts = [(e.side, e.t) for e in events if isinstance(e, StartEvent)]
    assert sorted(side for side, _ in starts) == sorted(SIDES)  # one StartEvent per side
    assert dict(starts)[BASELINE] == runners[BASELINE].reported
    # Each side's StartEvent precedes its first chunk.
    for side in SIDES:
        kinds = [type(e) for e in events if getattr(e, "side", None) == side]
        assert kinds[0] is StartEvent and kinds[-1] is DoneEvent


def test_error_on_one_side_is_reported_and_other_side_finishes():
    runners = {
        BASELINE: FakeRunner(BASELINE, [1] * 5),
        SPECULATIVE: FakeRunner(SPECULATIVE, [], fail_with=DemoError("draft failed to load")),
    }
    chunks, results, _ = collect(race(runners, "p", SETTINGS))
    assert results[SPECULATIVE].error == "draft failed to load"
    assert results[BASELINE].error is None and len(chunks[BASELINE]) == 5


def test_unexpected_exception_is_reported_not_hung():
    runners = {
        BASELINE: FakeRunner(BASELINE, [1] * 3),
        SPECULATIVE: FakeRunner(SPECULATIVE, [], fail_with=RuntimeError("boom")),
    }
    _, results, _ = collect(race(runners, "p", SETTINGS))
    # The page gets a sentence; the exception's name and text go to the server log (issue 21).
    assert results[SPECULATIVE].error == UNEXPECTED


def test_fair_runs_one_side_then_the_other():
    runners = {
        BASELINE: FakeRunner(BASELINE, [1] * 4),
        SPECULATIVE: FakeRunner(SPECULATIVE, [1, 3]),
    }
    chunks, results, order = collect(fair(runners, "p", SETTINGS))
    assert order == [BASELINE] * 4 + [SPECULATIVE] * 2
    assert results[BASELINE].end <= results[SPECULATIVE].start


class FakeClock:
    """perf_counter and sleep for replay(): sleeping advances the clock, nothing waits."""

    def __init__(self):
        self.now = 1000.0
        self.sleeps = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.sleeps.append(seconds)
        self.now += seconds


def recorded(side, start, offsets, sizes=None):
    """A finished RunResult whose chunks arrived `offsets` seconds after `start`."""
    sizes = sizes or [1] * len(offsets)
    chunks, tok = [], 0
    for off, n in zip(offsets, sizes):
        chunks.append(Chunk(side, tuple(range(tok, tok + n)), "x" * n, "x" * (n - 1) if side == SPECULATIVE else "",
                            start + off))
        tok += n
    return RunResult(side, start=start, end=start + offsets[-1], chunks=chunks)


def test_replay_keeps_each_sides_pace_and_merges_by_offset():
    # Measured one after the other (the speculative side started 50 s later), replayed at once.
    results = {
        BASELINE: recorded(BASELINE, 100.0, [0.04, 0.08, 0.12, 0.16, 0.20, 0.24]),
        SPECULATIVE: recorded(SPECULATIVE, 150.0, [0.05, 0.10, 0.15], sizes=[1, 2, 3]),
    }
    for speed in (1.0, 2.0):
        fake = FakeClock()
        t0 = fake.now
        seen = []
        for e in replay(results, speed=speed, sleep=fake.sleep, clock=fake.clock):
            seen.append((fake.now - t0, e))
        assert all(e.phase == "replay" for _, e in seen)
        assert [e.side for _, e in seen].count(SPECULATIVE) == 3 and len(seen) == 9
        # Every chunk is shown at its offset from its own side's start (÷ speed) ...
        for at, e in seen:
            assert at == pytest.approx((e.chunk.t - results[e.side].start) / speed)
        # ... so the two sides interleave, and the replay lasts as long as the slower side
        # took alone (0.24 s), not the sum of both runs.
        assert [e.side for _, e in seen][:4] == [BASELINE, SPECULATIVE, BASELINE, SPECULATIVE]
        assert fake.now - t0 == pytest.approx(0.24 / speed)


def test_replay_stops():
    results = {s: recorded(s, 10.0, [0.01 * (i + 1) for i in range(50)]) for s in SIDES}
    fake = FakeClock()
    stop = threading.Event()
    seen = 0
    for _ in replay(results, stop=stop, sleep=fake.sleep, clock=fake.clock):
        seen += 1
        if seen == 3:
            stop.set()
    assert seen == 3


def test_a_replay_that_waits_minutes_sees_stop_within_one_slice():
    # Issue 21: a crafted recording's second step 899 s after its first; Stop must not wait for it.
    results = {s: recorded(s, 0.0, [0.0, 899.0]) for s in SIDES}
    fake = FakeClock()
    stop = threading.Event()
    naps = []

    def sleep(seconds):
        naps.append(seconds)
        fake.sleep(seconds)
        if len(naps) == 3:
            stop.set()  # Stop pressed while the replay waits for the 899 s step

    events = list(replay(results, stop=stop, sleep=sleep, clock=fake.clock))
    assert [e.chunk.t for e in events] == [0.0, 0.0]  # the two first steps, never the last
    assert len(naps) == 3 and max(naps) <= REPLAY_SLICE_S  # it noticed at the first look after the Stop


def test_a_waiting_replay_yields_heartbeats_and_closing_it_sets_stop():
    results = {s: recorded(s, 0.0, [0.0, 899.0]) for s in SIDES}
    fake = FakeClock()
    stop = threading.Event()
    stream = replay(results, stop=stop, sleep=fake.sleep, clock=fake.clock, heartbeats=True)
    assert [next(stream).side for _ in range(2)] == list(SIDES)
    assert next(stream) is HEARTBEAT and next(stream) is HEARTBEAT  # waiting: a point to close it at each slice
    assert fake.now == pytest.approx(1000.0 + 2 * REPLAY_SLICE_S)
    stream.close()  # the consumer leaves (Stop, tab closed)
    assert stop.is_set()


def _chunks(sizes, side=SPECULATIVE, start=0.0, step=0.1):
    out, tok = [], 0
    for i, n in enumerate(sizes):
        out.append(Chunk(side, tuple(range(tok, tok + n)), "x" * n, "x" * (n - 1), start + (i + 1) * step))
        tok += n
    return out


def test_side_stats_are_consistent():
    chunks = _chunks([1, 5, 5, 3])
    st = side_stats(chunks, start=0.0, now=0.5)
    assert st.tokens == 14
    assert st.tokens_per_s == pytest.approx(14 / 0.5)
    assert st.ttft_s == pytest.approx(0.1)
    assert st.tpot_ms == pytest.approx((0.4 - 0.1) / 13 * 1000)
    # Verify steps only: the prompt's step (its 1 token, no guess) is left out of τ (metrics docstring).
    assert st.steps == 3 and st.tokens_per_step == pytest.approx((5 + 5 + 3) / 3)
    assert st.accepted == 4 + 4 + 2
    base = side_stats(_chunks([1] * 7, side=BASELINE), start=0.0, now=0.7)
    assert base.accepted == 0
    assert speedup(base, st) == pytest.approx((14 / 0.5) / 10)


def test_acceptance_rate_and_verdicts():
    assert acceptance_rate(8, 10) == 0.8
    assert acceptance_rate(None, 10) is None and acceptance_rate(0, 0) is None
    assert equality_verdict([1, 2, 3], [1, 2, 3]) == "identical"
    assert equality_verdict([1, 2, 3], [1, 9, 3]) == "diverged at token 2"
    assert equality_verdict([1, 2], [1, 2, 3]).startswith("diverged at token 3")


def test_one_comparison_by_hand():
    """metrics.compare: the numbers every consumer shows (page, CLI, scoreboard, recordings,
    three-way, bench), here from timestamps and counts written by hand."""
    from demo.core.metrics import compare
    from demo.core.streaming import Chunk, RunResult

    def run(side, steps, every, error=None, accepted=None, drafted=None):
        chunks = [Chunk(side, tuple(range(10 * i, 10 * i + n)), "x" * n, "x" * (n - 1), 100.0 + every * (i + 1))
                  for i, n in enumerate(steps)]
        return RunResult(side=side, start=100.0, end=chunks[-1].t, chunks=chunks, error=error,
                         ov_accepted_tokens=accepted, ov_draft_tokens=drafted)

    base = run("baseline", [1] * 12, 0.5)                      # 12 tokens in 6 s: 2 tok/s
    # K = 4: the prompt's step, then verify steps keeping 3, 3 and (the last, which OpenVINO
    # does not count) 2 guesses: OpenVINO says 6 of 8 drafted accepted, the stream shows 8 kept.
    spec = run("speculative", [1, 4, 4, 3], 0.75, accepted=6, drafted=8)  # 12 tokens in 3 s: 4 tok/s
    c = compare(base, spec)
    assert (c.baseline.tokens_per_s, c.speculative.tokens_per_s) == (pytest.approx(2.0), pytest.approx(4.0))
    # The rate is OpenVINO's accepted ÷ drafted, both without the last step; never the stream's
    # count (8, with the last step) over OpenVINO's drafted (8, without it): that would say 100 %.
    assert c.speedup == pytest.approx(2.0) and c.acceptance_rate == pytest.approx(6 / 8)
    assert (c.ov_accepted, c.ov_drafted) == (6, 8)
    assert c.speculative.accepted == 3 + 3 + 2 and c.speculative.steps == 3
    assert c.speculative.tokens_per_step == pytest.approx((4 + 4 + 3) / 3)
    assert c.baseline.ttft_s == pytest.approx(0.5) and not c.failed
    assert c.verdict.startswith("diverged at token 3")  # the hand-made ids: 0, 10, 20 against 0, 10, 11
    broken = compare(base, run("speculative", [3], 0.75, error="OpenVINO failed"))
    assert broken.failed and broken.speedup is None


def test_settings_validation_messages():
    with pytest.raises(DemoError, match="not both"):
        GenerationSettings(assistant_tokens=3, confidence_threshold=0.5).validated()
    with pytest.raises(DemoError, match="between 1 and 32"):
        GenerationSettings(assistant_tokens=0).validated()
    with pytest.raises(DemoError, match="Max new tokens"):
        GenerationSettings(max_new_tokens=0).validated()
    with pytest.raises(DemoError, match="Prompt lookup"):
        GenerationSettings(method="prompt_lookup", assistant_tokens=None, confidence_threshold=0.3).validated()
    assert GenerationSettings(assistant_tokens=None, confidence_threshold=0.4).validated()


def test_race_threads_split_the_cores():
    assert race_threads(2) == 1
    assert race_threads(8) == 4
    assert race_threads(1) == 1


def test_incremental_detokenizer_never_splits_a_character():
    # A byte-level "tokenizer": each id is one byte of UTF-8.
    text = "héllo 👋 wörld\nnext line ✓"
    ids = list(text.encode())

    def decode(seq):
        return bytes(seq).decode("utf-8", errors="replace")

    detok = IncrementalDetokenizer(decode)
    out = []
    for i in range(0, len(ids), 3):
        head, last = detok.feed(ids[i:i + 3])
        assert "\ufffd" not in head + last
        out.append(head + last)
    out.append(detok.flush())
    assert "".join(out) == text
