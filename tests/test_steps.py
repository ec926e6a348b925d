"""The step view's reconstruction (demo.engine.steps) on real SmolLM2 inference: the draft's
proposals, rebuilt after the run, must tell the run's story step for step in exact mode."""

import threading

import pytest

from demo.core.settings import GenerationSettings, PipelineOptions
from demo.core.streaming import SPECULATIVE
from demo.engine import steps
from demo.engine.openvino_runner import template
from demo.engine.pipelines import PipelineCache
from tests.conftest import SMOLLM2

PROMPTS = ("Write a Python function that reverses a string.", "Explain what a hash table is in two sentences.")
K = 4


@pytest.fixture(scope="module")
def int4_draft(presets, session_store, smollm2_ir):
    """SmolLM2 in int4 drafting for its gguf self: a real draft that is often wrong."""
    return session_store.prepare(presets.get(SMOLLM2).draft, "draft model", weight_format="int4_sym").path


@pytest.fixture(scope="module")
def cache():
    return PipelineCache(max_pairs=1)


def run_and_reconstruct(cache, main, draft, prompt, exact=True, **kw):
    import openvino_genai

    options = PipelineOptions(exact=exact, threads=1)
    runner = cache.get(main, draft, "draft", options)[SPECULATIVE]
    result = runner.run(prompt, GenerationSettings(max_new_tokens=48, assistant_tokens=K), lambda c: True)
    assert result.error is None
    tok = openvino_genai.Tokenizer(str(main))
    ids = tok.encode(template(tok, prompt)).input_ids.data[0].tolist()
    chunk_ids = [c.token_ids for c in result.chunks]
    report = steps.reconstruct(draft, options.with_threads(None), ids, chunk_ids, K,
                               lambda shown: {t: tok.decode([t]) for t in shown}, **kw)
    return result, report


@pytest.mark.parametrize("which", ["self-draft", "int4 draft"])
def test_exact_mode_every_step_matches_the_streamed_sizes(cache, smollm2_ir, int4_draft, which):
    draft = smollm2_ir if which == "self-draft" else int4_draft
    rejected = 0
    for prompt in PROMPTS:
        result, report = run_and_reconstruct(cache, smollm2_ir, draft, prompt)
        assert report.complete and len(report.steps) == len(result.chunks) - 1
        for step, chunk in zip(report.steps, result.chunks[1:]):
            assert step.tokens == chunk.token_ids and len(step.proposed) == K
            assert step.kept == len(chunk.token_ids) - 1
            assert step.matches, (prompt, step)
            if not step.last:
                assert step.agreed == step.kept  # the reconstruction keeps exactly what the run kept
            rejected += step.kept < K and not step.last
        assert report.differ == 0
        assert set(report.texts) >= {t for s in report.steps for t in s.proposed}
    if which == "int4 draft":
        assert rejected > 0  # a real draft was rejected somewhere: the check had something to check
    else:
        assert rejected == 0  # the model drafting for itself: every guess kept


def test_the_trimmed_kv_cache_proposes_what_a_fresh_one_does(smollm2_ir, int4_draft):
    # The draft keeps its KV cache across steps, trimmed back to the tokens that survived;
    # feeding the whole context from scratch every time must propose the same guesses.
    options = PipelineOptions(exact=True)
    trimmed = steps.DraftProposer(int4_draft, options)
    assert trimmed._axis is not None
    fresh = steps.DraftProposer(int4_draft, options)
    fresh._axis = None  # no trimming: reset and re-feed every step
    context = list(range(300, 340))
    for extra in ([5, 6, 7], [8], [9, 10, 11, 12, 13], [14, 15]):
        context = context[:-2] + extra  # some of what was fed is thrown away, as after a rejection
        assert trimmed.propose(context, K) == fresh.propose(context, K)


def test_a_planted_wrong_reconstruction_is_flagged():
    # Steps: kept 2 of K=3 (the main model's own token 9), then kept 3, then a last step.
    chunk_ids = [(1, 2, 9), (3, 4, 5, 6), (7, 8)]
    right = [(1, 2, 30), (3, 4, 5), (7, 40, 41)]
    assert [s.matches for s in steps.check_steps(chunk_ids, right)] == [True, True, True]
    # The draft "proposes" the token the main model produced itself: it would have been kept.
    too_good = [(1, 2, 9), (3, 4, 5), (7, 40, 41)]
    # The draft misses a guess the run kept.
    too_bad = [(1, 20, 30), (3, 4, 5), (7, 40, 41)]
    # The run's last step kept 1 guess (maybe cut after it): a proposal that misses it differs.
    wrong_last = [(1, 2, 30), (3, 4, 5), (70, 8, 41)]
    for planted, where in ((too_good, 0), (too_bad, 0), (wrong_last, 2)):
        checked = steps.check_steps(chunk_ids, planted)
        assert [i for i, s in enumerate(checked) if not s.matches] == [where]
    report = steps.StepReport(tuple(steps.check_steps(chunk_ids, too_good)), {}, True, 0.0)
    assert report.differ == 1


def test_a_real_run_with_one_planted_step_counts_one_difference(cache, smollm2_ir, int4_draft):
    result, report = run_and_reconstruct(cache, smollm2_ir, int4_draft, PROMPTS[0])
    proposals = [s.proposed for s in report.steps]
    first_rejection = next(i for i, s in enumerate(report.steps) if s.kept < K)
    s = report.steps[first_rejection]
    planted = list(proposals)
    planted[first_rejection] = s.tokens[:s.kept + 1] + s.proposed[s.kept + 1:]  # guess the main model's token
    checked = steps.check_steps([c.token_ids for c in result.chunks[1:]], planted)
    assert [i for i, c in enumerate(checked) if not c.matches] == [first_rejection]


def test_stopped_or_out_of_time_shows_the_steps_it_reached(cache, smollm2_ir, int4_draft):
    stop = threading.Event()
    stop.set()
    _, report = run_and_reconstruct(cache, smollm2_ir, int4_draft, PROMPTS[0], stop=stop)
    assert not report.complete and report.steps == ()
    ticks = iter(range(100))
    _, report = run_and_reconstruct(cache, smollm2_ir, int4_draft, PROMPTS[0], max_seconds=2.5,
                                    clock=lambda: next(ticks))
    # The clock reads 0 at the start, then 1, 2, 3 before steps 1, 2, 3: two steps fit.
    assert not report.complete and len(report.steps) == 2 and not report.steps[-1].last


def test_why_the_step_view_is_not_shown():
    cpu = PipelineOptions()
    assert steps.why_not(GenerationSettings(), cpu) is None
    assert "greedy" in steps.why_not(GenerationSettings(sampling=True), cpu)
    assert "prompt lookup" in steps.why_not(GenerationSettings(method="prompt_lookup"), cpu)
    assert "threshold" in steps.why_not(GenerationSettings(assistant_tokens=None, confidence_threshold=0.4), cpu)
