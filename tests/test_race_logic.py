"""Fast tests of the pure logic: merging, stopping, replay, stats, verdicts, settings."""

import threading
import time

import pytest

from demo.errors import DemoError
from demo.metrics import acceptance_rate, equality_verdict, side_stats, speedup
from demo.race import ChunkEvent, DoneEvent, race, replay, sequential
from demo.settings import GenerationSettings, race_threads
from demo.streaming import BASELINE, SPECULATIVE, Chunk, IncrementalDetokenizer
from tests.fakes import FakeRunner

SETTINGS = GenerationSettings(max_new_tokens=16)


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


def test_race_interleaves_and_slow_side_does_not_stall_fast_side():
    runners = {
        BASELINE: FakeRunner(BASELINE, [1] * 10, delay_s=0.05),   # slow: 0.5 s
        SPECULATIVE: FakeRunner(SPECULATIVE, [1, 3, 3, 3], delay_s=0.02),  # fast: 0.08 s
    }
    t0 = time.perf_counter()
    chunks, results, order = collect(race(runners, "p", SETTINGS))
    assert sum(len(c.token_ids) for c in chunks[SPECULATIVE]) == 10
    assert len(chunks[BASELINE]) == 10
    # The fast side finished long before the slow one: it was never blocked by it.
    assert results[SPECULATIVE].end - t0 < 0.3
    assert results[BASELINE].end - t0 >= 0.45
    # Both sides appear before either finished: the streams overlap in time.
    assert order.index(BASELINE) < len(chunks[SPECULATIVE]) + 1
    assert set(results) == {BASELINE, SPECULATIVE}


def test_stop_cancels_both_sides_quickly():
    runners = {s: FakeRunner(s, [1] * 1000, delay_s=0.01) for s in (BASELINE, SPECULATIVE)}
    stop = threading.Event()
    results = {}
    t0 = None
    for e in race(runners, "p", SETTINGS, stop):
        if isinstance(e, ChunkEvent) and t0 is None and e.chunk.token_ids[0] >= 5:
            t0 = time.perf_counter()
            stop.set()
        if isinstance(e, DoneEvent):
            results[e.side] = e.result
    assert time.perf_counter() - t0 < 0.5
    assert all(r.cancelled for r in results.values())
    assert all(len(r.chunks) < 100 for r in results.values())


def test_closing_the_stream_stops_the_threads():
    runners = {s: FakeRunner(s, [1] * 1000, delay_s=0.01) for s in (BASELINE, SPECULATIVE)}
    stream = race(runners, "p", SETTINGS)
    next(stream)
    t0 = time.perf_counter()
    stream.close()  # what Gradio does when the visitor presses Stop or closes the tab
    assert time.perf_counter() - t0 < 0.5
    assert not any(t.name.startswith("race-") for t in threading.enumerate())


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
    assert "boom" in results[SPECULATIVE].error


def test_sequential_runs_one_side_then_the_other():
    runners = {
        BASELINE: FakeRunner(BASELINE, [1] * 4),
        SPECULATIVE: FakeRunner(SPECULATIVE, [1, 3]),
    }
    chunks, results, order = collect(sequential(runners, "p", SETTINGS))
    assert order == [BASELINE] * 4 + [SPECULATIVE] * 2
    assert results[BASELINE].end <= results[SPECULATIVE].start


def test_replay_keeps_each_sides_pace_and_merges_by_offset():
    runners = {
        BASELINE: FakeRunner(BASELINE, [1] * 6, delay_s=0.04),
        SPECULATIVE: FakeRunner(SPECULATIVE, [1, 2, 3], delay_s=0.04),
    }
    _, results, _ = collect(sequential(runners, "p", SETTINGS))
    t0 = time.perf_counter()
    events = list(replay(results))
    took = time.perf_counter() - t0
    assert [e.side for e in events].count(SPECULATIVE) == 3
    assert all(e.phase == "replay" for e in events)
    # The replay lasts as long as the slower side took alone (~0.24 s), not the sum.
    assert 0.18 < took < 0.4
    offsets = [e.chunk.t - results[e.side].start for e in events]
    assert offsets == sorted(offsets)


def test_replay_stops():
    runners = {s: FakeRunner(s, [1] * 50, delay_s=0.01) for s in (BASELINE, SPECULATIVE)}
    _, results, _ = collect(sequential(runners, "p", SETTINGS))
    stop = threading.Event()
    seen = 0
    for _ in replay(results, stop=stop):
        seen += 1
        if seen == 3:
            stop.set()
    assert seen == 3


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
    assert st.steps == 4 and st.tokens_per_step == pytest.approx(3.5)
    assert st.accepted == 0 + 4 + 4 + 2
    base = side_stats(_chunks([1] * 7, side=BASELINE), start=0.0, now=0.7)
    assert base.accepted == 0
    assert speedup(base, st) == pytest.approx((14 / 0.5) / 10)


def test_acceptance_rate_and_verdicts():
    assert acceptance_rate(8, 10) == 0.8
    assert acceptance_rate(None, 10) is None and acceptance_rate(0, 0) is None
    assert equality_verdict([1, 2, 3], [1, 2, 3]) == "identical"
    assert equality_verdict([1, 2, 3], [1, 9, 3]) == "diverged at token 2"
    assert equality_verdict([1, 2], [1, 2, 3]).startswith("diverged at token 3")


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
