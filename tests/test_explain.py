""""Why this speedup?" on a real run of the SmolLM2 fixture, checked against counts and
clocks taken outside OpenVINO's metrics."""

import time

import pytest

from demo.core.explain import explain, regime_sentence
from demo.core.settings import GenerationSettings, PipelineOptions
from demo.core.streaming import BASELINE, SPECULATIVE, DoneEvent
from demo.engine.pipelines import PipelineCache
from demo.engine.race import fair
from demo.web.render import why_html

K = 4


@pytest.fixture(scope="module")
def finished(smollm2_ir):
    runners = PipelineCache().get(smollm2_ir, smollm2_ir, "draft", PipelineOptions())
    settings = GenerationSettings(max_new_tokens=48, assistant_tokens=K)
    t0 = time.perf_counter()
    results = {e.side: e.result for e in fair(runners, "Write a Python function that reverses a string.",
                                                     settings) if isinstance(e, DoneEvent)}
    return results, time.perf_counter() - t0


def test_time_split_and_steps_agree_with_independent_counts(finished):
    results, wall = finished
    base, spec = results[BASELINE], results[SPECULATIVE]
    why = explain(base, spec, 1.0, K)
    # OpenVINO's main-model calls are the steps our streamer saw, one chunk per step, with
    # the same tokens in each; and one per-step timer entry per step, on both sides.
    assert spec.ov_main_calls == len(spec.chunks)
    assert base.ov_main_calls == len(base.chunks) == 48
    assert spec.ov_step_tokens == [len(c.token_ids) for c in spec.chunks]
    assert len(spec.ov_main_step_ms) == len(spec.ov_step_ms) == len(spec.chunks) and len(base.ov_main_step_ms) == 48
    # τ leaves the prompt's step (1 token) out; per-step costs leave its timer entry out.
    assert why.tokens_per_step == pytest.approx(47 / (len(spec.chunks) - 1))
    assert why.verify_step_ms == pytest.approx(sum(spec.ov_main_step_ms[1:]) / (len(spec.chunks) - 1))
    assert why.base_token_ms == pytest.approx(sum(base.ov_main_step_ms[1:]) / 47)
    # Windows nest: the main model's step lies inside its speculative step, and every step of
    # a side inside that side's generate() call, as our clock saw it.
    assert all(0 < m <= w + 1e-3 for m, w in zip(spec.ov_main_step_ms, spec.ov_step_ms))
    for r in (base, spec):
        assert sum(r.ov_step_ms) <= (r.end - r.start) * 1000
    # Drafting + verifying happened inside the speculative side's wall-clock time, but for
    # OpenVINO's accounting: a step where the draft had nothing scheduled re-adds its previous
    # forward (ContinuousBatchingImpl::step returns early without resetting inference_duration;
    # the first step of a reused pipeline, a last step), so allow two draft forwards more.
    spec_wall = spec.end - spec.start
    assert 0 < why.draft_s and 0 < why.verify_s
    draft_forward_s = why.draft_s / max(1, spec.ov_draft_tokens or 1)
    assert why.draft_s + why.verify_s <= spec_wall * 1.02 + 2 * draft_forward_s
    assert why.other_s == pytest.approx(max(0.0, spec_wall - why.draft_s - why.verify_s), abs=1e-6)
    # A verify step checks K+1 tokens: it costs more than one plain token, but not more than
    # K+1 separate steps plus a margin for the fixture's tiny size.
    assert why.verify_step_ms > 0 and why.base_token_ms > 0
    assert why.cost_ratio == pytest.approx(why.verify_step_ms / why.base_token_ms)
    assert why.regime.startswith(f"Checking {K + 1} tokens cost {why.cost_ratio:.1f}× one token here")


def test_why_html_shows_the_split_escaped(finished):
    results, _ = finished
    why = explain(results[BASELINE], results[SPECULATIVE], 1.23, K,
                  {"formats": "main <b>gguf</b>", "predicted_speedup": 1.5})
    html = why_html(why)
    assert "Why this speedup?" in html and "calibration predicted 1.50×" in html
    assert "Measured speedup 1.23×" in html
    assert "&lt;b&gt;gguf&lt;/b&gt;" in html and "<b>gguf</b>" not in html
    assert f'data-seconds="{why.draft_s:.4f}"' in html and f'data-seconds="{why.verify_s:.4f}"' in html


@pytest.mark.parametrize("ratio, step_ratio, tau, words", [
    (1.1, 2.0, 4.5, ("bound by reading the weights from memory", "paid off")),
    (2.8, 3.6, 3.0, ("each extra token costs arithmetic", "did not pay off")),
    (None, None, None, ("no per-step times",)),
])
def test_regime_sentence(ratio, step_ratio, tau, words):
    sentence = regime_sentence(ratio, step_ratio, 6, tau)
    for w in words:
        assert w in sentence
    if ratio is not None:
        assert sentence.startswith(f"Checking 6 tokens cost {ratio:.1f}×")
