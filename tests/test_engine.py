"""The engine on real OpenVINO inference with the SmolLM2-135M fixture (no fakes; one spy that
only records what a real runner delivered)."""

import threading
import time
import weakref

import pytest

from demo.core.errors import DemoError
from demo.core.metrics import equality_verdict, side_stats
from demo.core.settings import GenerationSettings, PipelineOptions
from demo.core.streaming import BASELINE, SPECULATIVE, ChunkEvent, DoneEvent, StartEvent, StatusEvent
from demo.engine.arena import Arena, RaceRequest
from demo.engine.pipelines import PipelineCache, check_device
from demo.engine.race import fair, race
from tests.fakes import RecordingRunner

PROMPT = "Write a Python function that reverses a string."
COPY_PROMPT = ("Repeat this list exactly, one item per line: apple, banana, cherry, date, "
               "elderberry, fig, grape, honeydew, kiwi, lemon.")


@pytest.fixture(scope="module")
def cache():
    return PipelineCache(max_pairs=4)


def pair(cache, ir, method="draft", **options):
    return cache.get(ir, ir if method == "draft" else None, method, PipelineOptions(**options))


def run_all(stream):
    """Consume a stream; return chunks per side, results per side, and the events in order."""
    chunks = {BASELINE: [], SPECULATIVE: []}
    results, events = {}, []
    for e in stream:
        events.append(e)
        if isinstance(e, ChunkEvent):
            chunks[e.side].append(e.chunk)
        elif isinstance(e, DoneEvent):
            results[e.side] = e.result
    return chunks, results, events


def streamed_before_first_done(events) -> set:
    """The sides that delivered a chunk before either side was done."""
    first_done = next(i for i, e in enumerate(events) if isinstance(e, DoneEvent))
    return {e.side for e in events[:first_done] if isinstance(e, ChunkEvent)}


def test_race_streams_both_sides_and_groups_chunks_by_step(cache, smollm2_ir):
    runners = pair(cache, smollm2_ir, threads=1)
    k = 4
    settings = GenerationSettings(max_new_tokens=48, assistant_tokens=k)
    chunks, results, events = run_all(race(runners, PROMPT, settings))
    base, spec = results[BASELINE], results[SPECULATIVE]
    assert base.error is None and spec.error is None
    # Both sides streamed before either finished: the streams overlapped (judged by the
    # order of events; run one after the other, the first side would be done first).
    assert streamed_before_first_done(events) == {BASELINE, SPECULATIVE}
    # The baseline yields one token per step; a speculative step yields accepted + 1 <= K + 1.
    assert all(len(c.token_ids) == 1 for c in base.chunks)
    sizes = [len(c.token_ids) for c in spec.chunks]
    assert max(sizes) <= k + 1 and max(sizes) > 1
    # Chunk grouping matches OpenVINO's own accepted count (which leaves out the final step).
    assert sum(c.accepted for c in spec.chunks[:-1]) == spec.ov_accepted_tokens > 0
    assert sum(sizes) == spec.ov_generated_tokens == 48
    # The text marked as accepted is the text of exactly the accepted tokens: decode each
    # step's guesses on their own (byte-level BPE: a token's text does not depend on its
    # neighbours, except for a multi-byte character split across steps, whose bytes the
    # detokenizer holds back: such a step, if any, is left out).
    decode = runners[SPECULATIVE].tokenizer.decode
    whole = [c for c in spec.chunks if c.text == decode(list(c.token_ids))]
    assert len(whole) >= len(spec.chunks) - 2
    for c in whole:
        assert c.accepted_text == (decode(list(c.token_ids[:-1])) if c.accepted else ""), c


def test_metrics_are_sane(cache, smollm2_ir):
    runners = pair(cache, smollm2_ir)
    runner = runners[SPECULATIVE]
    t0 = time.perf_counter()
    result = runner.run(PROMPT, GenerationSettings(max_new_tokens=40, assistant_tokens=3), lambda c: True)
    wall = time.perf_counter() - t0
    stats = side_stats(result.chunks, result.start, result.end)
    first, last = result.chunks[0].t, result.chunks[-1].t
    ov_ttft = result.ov_ttft_ms / 1000
    eps = 1e-3  # clock resolution and rounding, not a speed allowance
    # Tokens counted from the chunks are the tokens of the text, and OpenVINO's count.
    assert stats.tokens == result.ov_generated_tokens == len(result.token_ids) == 40
    assert runner.tokenizer.decode(result.token_ids) == result.text
    # Time windows nest, whatever the machine's speed: OpenVINO's first-token window lies
    # inside ours (from just before generate() to the streamer), which ends at the first
    # chunk, before the second one arrives.
    assert ov_ttft - eps <= stats.ttft_s == first - result.start < result.chunks[1].t - result.start
    # tok/s: between tokens / the wall clock measured out here (which holds our window) and
    # tokens / (OpenVINO's first-token time + first-to-last chunk time) (which our window holds).
    assert stats.tokens / wall <= stats.tokens_per_s <= stats.tokens / (ov_ttft - eps + last - first)
    assert stats.tokens_per_step == pytest.approx(39 / (len(result.chunks) - 1)) and stats.tokens_per_step > 1


def test_exact_mode_self_draft_is_identical_to_baseline(cache, smollm2_ir):
    runners = pair(cache, smollm2_ir, exact=True)
    settings = GenerationSettings(max_new_tokens=64, assistant_tokens=4)
    for prompt in (PROMPT, "Explain what a hash table is in two sentences."):
        _, results, _ = run_all(fair(runners, prompt, settings))
        b, s = results[BASELINE], results[SPECULATIVE]
        assert equality_verdict(b.token_ids, s.token_ids) == "identical", (b.text, s.text)
        assert s.ov_accepted_tokens > 0


def test_exact_mode_prompt_lookup_is_identical_and_accepts_copies(cache, smollm2_ir):
    runners = pair(cache, smollm2_ir, method="prompt_lookup", exact=True)
    settings = GenerationSettings(max_new_tokens=48, method="prompt_lookup", assistant_tokens=4)
    _, results, _ = run_all(fair(runners, COPY_PROMPT, settings))
    b, s = results[BASELINE], results[SPECULATIVE]
    assert equality_verdict(b.token_ids, s.token_ids) == "identical"
    assert sum(c.accepted for c in s.chunks) > 0  # copied n-grams were accepted


def test_cancel_stops_both_within_two_steps_and_next_run_works(cache, smollm2_ir):
    # After CANCEL, generate() returns once the step in flight (and, on the continuous-
    # batching backend, possibly the one after it) is done: at most two steps per side,
    # counted where the chunks are delivered (in the worker threads), not in seconds.
    k = 2
    settings = GenerationSettings(max_new_tokens=400, assistant_tokens=k)
    stop = threading.Event()
    runners = {s: RecordingRunner(r, watch=stop) for s, r in pair(cache, smollm2_ir, threads=1).items()}
    results, seen = {}, {BASELINE: 0, SPECULATIVE: 0}
    for e in race(runners, "Write a long story about a lighthouse keeper.", settings, stop):
        if isinstance(e, ChunkEvent):
            seen[e.side] += 1
            if not stop.is_set() and min(seen.values()) >= 3:  # both mid-stream, as a visitor sees it
                stop.set()
        if isinstance(e, DoneEvent):
            results[e.side] = e.result
    assert all(r.cancelled and r.error is None for r in results.values())
    for side, runner in runners.items():
        late = runner.after_stop
        assert len(late) <= 2, f"{side}: {len(late)} steps after the stop"
        assert sum(len(c.token_ids) for c in late) <= 2 * (k + 1 if side == SPECULATIVE else 1)
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
    _, results, _ = run_all(fair(runners, PROMPT, settings))
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
    # A prompt within the character limit but beyond the token limit is refused before
    # either side starts, with its length in tokens.
    long_prompt = "9;" * 7000  # 14,000 characters, ~7,000 tokens
    with pytest.raises(DemoError, match=r"The prompt is \d+ tokens long; this demo accepts at most \d+"):
        list(arena.run(RaceRequest(prompt=long_prompt, preset="smollm2-self-draft")))


def test_speculative_pipeline_without_k_still_drafts(cache, smollm2_ir):
    """Why fair mode cannot share one pipeline for both sides: with a draft attached, a
    request that sets no number of assistant tokens is NOT run by the main model alone on
    this OpenVINO GenAI (2026.4.1): its speculative pipeline sets K=5 then
    (default_num_assistant_tokens). If a release changes that, this test fails, and fair
    mode can share one pipeline; meanwhile a pair too big for two is loaded side by side
    in turn (test_fair_mode_loads_one_side_at_a_time_when_both_do_not_fit)."""
    import openvino_genai as ov

    pipe = pair(cache, smollm2_ir)[SPECULATIVE].pipe
    sizes = []

    class Steps(ov.StreamerBase):
        def write(self, token):
            sizes.append(len(token) if isinstance(token, list) else 1)
            return ov.StreamingStatus.RUNNING

        def end(self):
            pass

    config = ov.GenerationConfig()
    config.max_new_tokens = 32
    result = pipe.generate([PROMPT], config, Steps())
    assert result.extended_perf_metrics.get_num_draft_tokens() > 0
    assert max(sizes) > 1  # steps of several tokens: verified guesses


def test_prompt_plus_new_tokens_must_fit_the_models_context(presets, tmp_path):
    """A GGUF model's context length is kept at prepare time (the IR does not carry it);
    SmolLM2-135M-Instruct's model card gives 8192 tokens."""
    from demo.engine.openvino_runner import check_fits
    from demo.models.folders import max_context
    from demo.models.sources import ModelStore

    folder = ModelStore(tmp_path).prepare(presets.get("smollm2-self-draft").main).path
    assert max_context(folder) == 8192
    # Within one job's budget (1000 x 1000 tokens), against a model that holds 2,004 tokens.
    check_fits(SPECULATIVE, 1000, GenerationSettings(max_new_tokens=1000, assistant_tokens=4), 2004)  # 2004 fits
    with pytest.raises(DemoError, match=r"^The prompt \(1000 tokens\) plus 1001 new tokens does not fit in the "
                                        r"2004 tokens this model can hold; shorten the prompt or lower max new tokens\.$"):
        check_fits(SPECULATIVE, 1000, GenerationSettings(max_new_tokens=1001, assistant_tokens=4), 2004)


def test_one_job_is_bounded_in_prompt_tokens_times_new_tokens():
    """However large the model's context, a stranger cannot ask for the longest prompt and the
    longest answer at once: 4,096 x 512 = 2,097,152 token pairs at most (the prefill of such a
    prompt cannot be stopped once it runs)."""
    from demo.engine.openvino_runner import check_fits

    roomy = 1 << 20  # a context that never binds here
    check_fits(SPECULATIVE, 4096, GenerationSettings(max_new_tokens=512), roomy)
    check_fits(SPECULATIVE, 1024, GenerationSettings(max_new_tokens=2048), roomy)
    with pytest.raises(DemoError, match=r"^A 4096-token prompt with 513 new tokens is more work than one run may take "
                                        r"here \(prompt tokens × new tokens at most 2,097,152\); shorten the prompt "
                                        r"or lower max new tokens\.$"):
        check_fits(SPECULATIVE, 4096, GenerationSettings(max_new_tokens=513), roomy)
    with pytest.raises(DemoError, match=r"^A 1025-token prompt with 2048 new tokens"):
        check_fits("baseline", 1025, GenerationSettings(max_new_tokens=2048), roomy)


def live_runners() -> list:
    """OpenVINORunners alive in this process now (garbage collected first): an evicted
    side whose pipeline was really freed is not among them."""
    import gc

    from demo.engine.openvino_runner import OpenVINORunner

    gc.collect()
    return [o for o in gc.get_objects() if isinstance(o, OpenVINORunner)]


def test_fair_mode_loads_one_side_at_a_time_when_both_do_not_fit(presets, session_store, smollm2_ir):
    """A pair whose two sides exceed the memory budget together, but not alone, still runs
    in fair mode: each side's pipeline is loaded when it runs, the other one freed first,
    and each side gives the very tokens it gives with both loaded."""
    from demo.engine.pipelines import SideInTurn

    settings = GenerationSettings(max_new_tokens=16, assistant_tokens=3)
    request = RaceRequest(prompt=PROMPT, preset="smollm2-self-draft", mode="fair", settings=settings)
    roomy = Arena(presets, session_store, PipelineCache(max_pairs=1))
    _, both, _ = run_all(roomy.run(request))
    assert "one at a time" not in roomy.summarize(both, request).how
    pair_ = roomy.prepared(request)
    key = PipelineCache.key(pair_.main, pair_.draft, "draft", PipelineOptions())
    roomy.cache.clear()
    del roomy

    budget = PipelineCache(max_pairs=1).estimate(key) - 1  # each side fits alone, the two together do not
    arena = Arena(presets, session_store, PipelineCache(budget=budget))
    others = weakref.WeakSet(live_runners())  # other tests' module-scoped pipelines
    # What is alive is sampled in the engine's own thread, the moment a side's pipeline is
    # loaded: sampled when this loop reads the side's StartEvent, a slow consumer (a loaded
    # CI machine) could see the next side's load evict it already.
    alive_when_loaded, get_side = [], arena.cache.get_side

    def recording_get_side(key, side, status=lambda m: None):
        runner = get_side(key, side, status)
        alive_when_loaded.append((side, [r.side for r in live_runners() if r not in others]))
        return runner

    arena.cache.get_side = recording_get_side
    for run in range(2):
        alive_when_loaded.clear()
        events = list(arena.run(request))
        results = {e.side: e.result for e in events if isinstance(e, DoneEvent)}
        for side in (BASELINE, SPECULATIVE):
            assert results[side].error is None
            assert (side, [side]) in alive_when_loaded, f"run {run}: {alive_when_loaded}"
            assert results[side].token_ids == both[side].token_ids, f"run {run}: {side} differs"
        assert all(alive == [side] for side, alive in alive_when_loaded), f"run {run}: {alive_when_loaded}"
        loads = [e.message for e in events if isinstance(e, StatusEvent) and "loading the" in e.message]
        starts = [e.side for e in events if isinstance(e, StartEvent)]
        if run == 0:
            assert len(loads) == 2 and starts == [BASELINE, SPECULATIVE]
        else:  # the speculative side is still loaded: it goes first, and one load is enough
            assert len(loads) == 1 and starts == [SPECULATIVE, BASELINE], (loads, starts)
        assert "loaded one at a time" in arena.summarize(results, request).how
    assert all(isinstance(r, SideInTurn) for r in arena.runners(request).values())
    arena.cache.clear()


def test_a_pair_found_to_load_in_turn_stays_so_whatever_its_sides_measure(tmp_path):
    """The page says a fair race loaded its sides one at a time: that must stay true after the
    sides' measured sizes (here the speculative side measured larger than estimated) replace
    the estimate from the files, which once flipped the answer after the first load."""
    main, draft = tmp_path / "main", tmp_path / "draft"
    for folder, size in ((main, 100 << 20), (draft, 10 << 20)):
        folder.mkdir()
        (folder / "openvino_model.bin").write_bytes(b"\0" * size)
    key = PipelineCache.key(main, draft, "draft", PipelineOptions())
    estimate = PipelineCache(max_pairs=1)
    both = estimate.estimate(key)
    cache = PipelineCache(budget=both - 1)  # each side fits alone, the two together do not
    assert cache.in_turn(key)
    cache._sizes[(key, (SPECULATIVE,))] = both  # what the side measured once loaded
    assert cache.in_turn(key)
    assert not PipelineCache(budget=both).in_turn(key)  # a budget for both: loaded together
