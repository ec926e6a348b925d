"""The engine on real OpenVINO inference with the SmolLM2-135M fixture (no fakes here)."""

import threading
import time

import pytest

from demo.arena import Arena, RaceRequest, StatusEvent
from demo.errors import DemoError
from demo.metrics import equality_verdict, side_stats
from demo.pipelines import PipelineCache, check_device
from demo.race import ChunkEvent, DoneEvent, StartEvent, race, sequential
from demo.settings import GenerationSettings, PipelineOptions
from demo.streaming import BASELINE, SPECULATIVE

PROMPT = "Write a Python function that reverses a string."
COPY_PROMPT = ("Repeat this list exactly, one item per line: apple, banana, cherry, date, "
               "elderberry, fig, grape, honeydew, kiwi, lemon.")


@pytest.fixture(scope="module")
def cache():
    return PipelineCache(max_pairs=4)


def pair(cache, ir, method="draft", **options):
    return cache.get(ir, ir if method == "draft" else None, method, PipelineOptions(**options))


def run_all(stream):
    chunks = {BASELINE: [], SPECULATIVE: []}
    results, order = {}, []
    for e in stream:
        if isinstance(e, ChunkEvent):
            chunks[e.side].append(e.chunk)
            order.append((e.side, time.perf_counter()))
        elif isinstance(e, DoneEvent):
            results[e.side] = e.result
    return chunks, results, order


def test_race_streams_both_sides_and_groups_chunks_by_step(cache, smollm2_ir):
    runners = pair(cache, smollm2_ir, threads=1)
    k = 4
    settings = GenerationSettings(max_new_tokens=48, assistant_tokens=k)
    chunks, results, order = run_all(race(runners, PROMPT, settings))
    base, spec = results[BASELINE], results[SPECULATIVE]
    assert base.error is None and spec.error is None
    # Both sides streamed, and their streams overlapped in time.
    first_done = min(base.end, spec.end)
    assert any(s == BASELINE and t < first_done for s, t in order)
    assert any(s == SPECULATIVE and t < first_done for s, t in order)
    # The baseline yields one token per step; a speculative step yields accepted + 1 <= K + 1.
    assert all(len(c.token_ids) == 1 for c in base.chunks)
    sizes = [len(c.token_ids) for c in spec.chunks]
    assert max(sizes) <= k + 1 and max(sizes) > 1
    # Chunk grouping matches OpenVINO's accepted count (which leaves out the final step).
    assert sum(c.accepted for c in spec.chunks[:-1]) == spec.ov_accepted_tokens
    assert sum(sizes) == spec.ov_generated_tokens == 48


def test_metrics_are_sane(cache, smollm2_ir):
    runners = pair(cache, smollm2_ir)
    runner = runners[SPECULATIVE]
    t0 = time.perf_counter()
    result = runner.run(PROMPT, GenerationSettings(max_new_tokens=40, assistant_tokens=3), lambda c: True)
    wall = time.perf_counter() - t0
    stats = side_stats(result.chunks, result.start, result.end)
    # Tokens counted from the chunks are the tokens of the text.
    assert stats.tokens == result.ov_generated_tokens == len(result.token_ids)
    assert runner.tokenizer.decode(result.token_ids) == result.text
    # tok/s agrees with tokens ÷ wall-clock seconds measured out here (within 10 %).
    assert stats.tokens_per_s == pytest.approx(stats.tokens / wall, rel=0.10)
    # TTFT agrees with OpenVINO's own measurement (within 50 ms: we also count templating).
    assert abs(stats.ttft_s * 1000 - result.ov_ttft_ms) < 50
    assert stats.tokens_per_step > 1


def test_exact_mode_self_draft_is_identical_to_baseline(cache, smollm2_ir):
    runners = pair(cache, smollm2_ir, exact=True)
    settings = GenerationSettings(max_new_tokens=64, assistant_tokens=4)
    for prompt in (PROMPT, "Explain what a hash table is in two sentences."):
        _, results, _ = run_all(sequential(runners, prompt, settings))
        b, s = results[BASELINE], results[SPECULATIVE]
        assert equality_verdict(b.token_ids, s.token_ids) == "identical", (b.text, s.text)
        assert s.ov_accepted_tokens > 0


def test_exact_mode_prompt_lookup_is_identical_and_accepts_copies(cache, smollm2_ir):
    runners = pair(cache, smollm2_ir, method="prompt_lookup", exact=True)
    settings = GenerationSettings(max_new_tokens=48, method="prompt_lookup", assistant_tokens=4)
    _, results, _ = run_all(sequential(runners, COPY_PROMPT, settings))
    b, s = results[BASELINE], results[SPECULATIVE]
    assert equality_verdict(b.token_ids, s.token_ids) == "identical"
    assert sum(c.accepted for c in s.chunks) > 0  # copied n-grams were accepted


def test_cancel_stops_both_within_half_a_second_and_next_run_works(cache, smollm2_ir):
    runners = pair(cache, smollm2_ir, threads=1)
    # After CANCEL, generate() returns once the step in flight (and, on the continuous-
    # batching backend, the one after it) is done, so the stop latency is one to two
    # speculative steps. K = 2 keeps a step of the self-drafting fixture near 0.1 s
    # (measured: 0.24-0.39 s to stop; K = 4 took 0.53-0.58 s).
    settings = GenerationSettings(max_new_tokens=400, assistant_tokens=2)
    stop = threading.Event()
    results, stopped_at, seen = {}, None, {BASELINE: 0, SPECULATIVE: 0}
    for e in race(runners, "Write a long story about a lighthouse keeper.", settings, stop):
        if isinstance(e, ChunkEvent):
            seen[e.side] += 1
            if stopped_at is None and min(seen.values()) >= 3:  # both mid-stream, as a visitor sees it
                stopped_at = time.perf_counter()
                stop.set()
        if isinstance(e, DoneEvent):
            results[e.side] = e.result
    assert max(r.end for r in results.values()) - stopped_at < 0.5
    assert all(r.cancelled for r in results.values())
    assert all(len(r.token_ids) < 400 for r in results.values())
    # The pipelines are fine afterwards.
    _, again, _ = run_all(race(runners, PROMPT, GenerationSettings(max_new_tokens=8, assistant_tokens=4)))
    assert all(len(r.token_ids) == 8 and not r.cancelled for r in again.values())


def test_missing_device_and_conflicting_settings_give_clear_errors(cache, smollm2_ir):
    with pytest.raises(DemoError, match=r"device 'GPU.7' is not available on this machine; choose one of: CPU"):
        check_device("GPU.7", "main")
    with pytest.raises(DemoError, match="draft device 'NPU'"):
        pair(cache, smollm2_ir, draft_device="NPU")
    with pytest.raises(DemoError, match="not both"):
        GenerationSettings(assistant_tokens=3, confidence_threshold=0.3).validated()


def test_confidence_threshold_mode_runs(cache, smollm2_ir):
    runners = pair(cache, smollm2_ir)
    result = runners[SPECULATIVE].run(
        PROMPT, GenerationSettings(max_new_tokens=32, assistant_tokens=None, confidence_threshold=0.3), lambda c: True)
    assert result.error is None and len(result.token_ids) == 32


def test_sampling_runs_on_both_sides(cache, smollm2_ir):
    runners = pair(cache, smollm2_ir)
    settings = GenerationSettings(max_new_tokens=16, sampling=True, temperature=0.8, top_p=0.9)
    _, results, _ = run_all(sequential(runners, PROMPT, settings))
    assert all(len(r.token_ids) == 16 and r.error is None for r in results.values())


def test_arena_reports_status_then_tokens_and_rejects_bad_prompts(presets, session_store, smollm2_ir):
    arena = Arena(presets, session_store, PipelineCache(max_pairs=1))
    request = RaceRequest(prompt=PROMPT, preset="smollm2-self-draft", mode="fair",
                          settings=GenerationSettings(max_new_tokens=12, assistant_tokens=3))
    events = list(arena.run(request))
    kinds = [type(e) for e in events]
    assert kinds[0] is StatusEvent and StartEvent in kinds and kinds.count(DoneEvent) == 2
    results = {e.side: e.result for e in events if isinstance(e, DoneEvent)}
    summary = arena.summarize(results, request)
    assert summary.speedup and summary.baseline.tokens == 12 and "fair mode" in summary.how
    for bad, msg in [("", "empty"), ("   \n", "empty"), ("x" * 20_000, "characters long")]:
        with pytest.raises(DemoError, match=msg):
            list(arena.run(RaceRequest(prompt=bad, preset="smollm2-self-draft")))
    with pytest.raises(DemoError, match="Unknown preset 'nope'"):
        list(arena.run(RaceRequest(prompt=PROMPT, preset="nope")))
    # A prompt within the character limit but beyond the token limit is refused per side.
    long_prompt = "9;" * 7000  # 14,000 characters, ~7,000 tokens
    results = {e.side: e.result for e in arena.run(RaceRequest(prompt=long_prompt, preset="smollm2-self-draft"))
               if isinstance(e, DoneEvent)}
    assert all("tokens long" in r.error for r in results.values())
