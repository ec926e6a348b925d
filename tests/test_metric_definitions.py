"""One definition per number (demo.core.metrics' docstring), used everywhere: the summary,
"Why this speedup?", the acceptance curve and the page's labels agree, on runs written by hand
whose counts are worked out in the comments. No model."""

import re
from html import unescape

import pytest

from demo.core.acceptance import acceptance_curve, curve_of_chunks
from demo.core.explain import explain
from demo.core.metrics import DEFINITIONS, compare, side_stats
from demo.core.streaming import BASELINE, SPECULATIVE, Chunk, RunResult
from demo.engine.request import Summary
from demo.web.render import esc, stats_html, summary_html, why_html

pytestmark = pytest.mark.fast


def run(side, sizes, every=0.1, **ov):
    """A finished run: chunk i has sizes[i] tokens and arrives (i + 1) * every after start."""
    chunks, tok = [], 0
    for i, n in enumerate(sizes):
        chunks.append(Chunk(side, tuple(range(tok, tok + n)), "x" * n, "x" * (n - 1) if side == SPECULATIVE else "",
                            10.0 + every * (i + 1)))
        tok += n
    return RunResult(side, start=10.0, end=chunks[-1].t, chunks=chunks, **ov)


def test_tokens_per_step_is_the_same_number_in_the_summary_the_curve_and_the_explanation():
    # K = 4. The prompt's step gives 1 token; the verify steps give 5, 2, 5, 3 = 15 tokens in 4.
    spec = run(SPECULATIVE, [1, 5, 2, 5, 3], ov_draft_tokens=12, ov_accepted_tokens=9)
    base = run(BASELINE, [1] * 16)
    tau = 15 / 4
    assert side_stats(spec.chunks, spec.start, spec.end).tokens_per_step == pytest.approx(tau)
    assert explain(base, spec, 1.0, 4).tokens_per_step == pytest.approx(tau)
    # The curve's τ(K) telescopes to the same mean when the last step is not censored.
    uncensored = acceptance_curve([5, 2, 5, 3], 4, last_censored=False)
    assert uncensored.tokens_per_step() == pytest.approx(tau)
    assert curve_of_chunks(spec.chunks, 4).steps == 4  # the prompt's step is left out there too
    # Accepted guesses: 4 + 1 + 4 + 2, from the stream, the last step included.
    assert side_stats(spec.chunks, spec.start, spec.end).accepted == 11


def test_the_acceptance_rate_is_openvinos_accepted_over_drafted_and_the_page_says_so():
    # OpenVINO leaves the last step out of both counts: steps 5, 2, 5 kept 4 + 1 + 4 = 9 of 12.
    spec = run(SPECULATIVE, [1, 5, 2, 5, 3], ov_draft_tokens=12, ov_accepted_tokens=9)
    c = compare(run(BASELINE, [1] * 16), spec)
    assert c.acceptance_rate == pytest.approx(9 / 12)  # not the stream's 11 over 12
    html = summary_html(Summary.of(c, how="how", errors={}))
    assert "acceptance rate 75% (9 of 12 guesses; OpenVINO's count, which leaves out the last step)" in html
    assert "11 guesses accepted in 4 verify steps; 3.75 tokens per verify step" in html
    assert 'data-accepted="11"' in html


def test_the_page_names_what_tok_s_and_ttft_include():
    assert "tokenization" in DEFINITIONS["TTFT"] and "streamer" in DEFINITIONS["TTFT"]
    assert "tokenization" in DEFINITIONS["tok/s"] and "prefill" in DEFINITIONS["tok/s"]
    html = stats_html(side_stats(run(BASELINE, [1] * 4).chunks, 10.0, 10.4), state="done")
    assert f'title="{esc(DEFINITIONS["TTFT"])}"><b>100 ms</b> TTFT' in html
    assert f'title="{esc(DEFINITIONS["tok/s"])}"><b>10.0</b> tok/s' in html
    c = compare(run(BASELINE, [1] * 4), run(SPECULATIVE, [1, 3]))
    assert esc(DEFINITIONS["TTFT"]) in summary_html(Summary.of(c, how="how", errors={}))


def timed(side, sizes, main_ms, step_ms=None, **ov):
    r = run(side, sizes, **ov)
    r.ov_main_step_ms = main_ms
    r.ov_step_ms = step_ms if step_ms is not None else main_ms
    r.ov_step_tokens = list(sizes)
    return r


def test_per_step_costs_leave_the_prompts_step_out():
    # The first entry is the prompt's step, its prefill; a long prompt makes it huge. The verify
    # steps cost 30 ms against 20 ms for a plain step: 1.5×, whatever the prompt's length.
    for prefill_ms in (50.0, 5000.0):
        base = timed(BASELINE, [1] * 9, [prefill_ms] + [20.0] * 8)
        spec = timed(SPECULATIVE, [1, 5, 5], [prefill_ms, 30.0, 30.0], [prefill_ms * 2, 50.0, 50.0],
                     ov_draft_tokens=4, ov_accepted_tokens=4)
        why = explain(base, spec, 1.8, 4)
        assert (why.verify_step_ms, why.base_token_ms) == (pytest.approx(30.0), pytest.approx(20.0))
        assert why.cost_ratio == pytest.approx(1.5)
        # (1.5 - 1) / 4 = 0.125 a checked token: memory-bound. A step with drafting: 50 / 20 =
        # 2.5× one token for 5 tokens, so it paid off.
        assert why.regime == ("Checking 5 tokens cost 1.5× one token here: each step is bound by reading the "
                              "weights from memory, which is where speculation pays; with drafting, a step cost "
                              "2.5× one token and produced 5.0 tokens, so speculation paid off.")


def test_a_confidence_threshold_is_explained_with_the_guesses_it_made():
    # No K: 6 guesses drafted over the 3 steps OpenVINO counted (all verify steps but the last).
    base = timed(BASELINE, [1] * 9, [50.0] + [20.0] * 8)
    spec = timed(SPECULATIVE, [1, 3, 2, 3, 1], [90.0, 24.0, 24.0, 24.0, 24.0], ov_draft_tokens=6,
                 ov_accepted_tokens=5)
    why = explain(base, spec, 1.3, None)
    assert why.guesses == "2.0 guesses on average + 1 (confidence threshold)"
    assert why.regime.startswith("Checking 3 tokens cost 1.2× one token here: each step is bound by reading")
    html = why_html(why)
    assert "None" not in html and "no per-model timings" not in html and "unknown" not in html
    assert "One verify step (2.0 guesses on average + 1 (confidence threshold)) took 24 ms" in html


def test_prompt_lookup_falls_back_to_one_clock_for_both_sides():
    # OpenVINO's prompt-lookup step timer reads 0 ms (no per-step list): both sides are then
    # timed between chunks at the streamer, 0.1 s a step on the baseline, 0.15 s with lookup;
    # never OpenVINO's timer on one side and the stream on the other.
    base = timed(BASELINE, [1] * 6, [999.0] + [20.0] * 5)
    spec = run(SPECULATIVE, [1, 4, 1, 3], every=0.15)
    why = explain(base, spec, 1.2, 4, method="prompt_lookup")
    assert why.timer == "the time between steps at the streamer"
    assert (why.verify_step_ms, why.base_token_ms) == (pytest.approx(150.0), pytest.approx(100.0))
    assert why.guesses == "up to 4 looked-up guesses + 1"
    assert why.regime.startswith("A verify step cost 1.5× one plain step here")
    # The other way round (a baseline without OpenVINO's timers, e.g. one replayed): the same.
    spec = timed(SPECULATIVE, [1, 4, 1, 3], [999.0, 40.0, 40.0, 40.0])
    spec.chunks = run(SPECULATIVE, [1, 4, 1, 3], every=0.15).chunks
    why = explain(run(BASELINE, [1] * 6), spec, 1.2, 4)
    assert why.timer == "the time between steps at the streamer"
    assert (why.verify_step_ms, why.base_token_ms) == (pytest.approx(150.0), pytest.approx(100.0))


def test_the_result_reads_at_a_glance_and_the_measuring_details_are_behind_a_fold():
    """Issue 59, item 11: the speedup, the two rates and whether the texts match on one line;
    the definitions and OpenVINO's raw property names under "How this was measured"."""
    c = compare(run(BASELINE, [1] * 16), run(SPECULATIVE, [1, 5, 2, 5, 3]))
    html = summary_html(Summary.of(c, how="both pipelines at once; INFERENCE_NUM_THREADS=1", errors={}))
    first, _, rest = html.partition("<br>")
    glance = unescape(re.sub(r"<[^>]+>", "", first))
    assert re.fullmatch(r"[\d.]+× speedup \([\d.]+ vs [\d.]+ tok/s\), outputs identical", glance), glance
    fold = rest[rest.index('<details class="how-measured">'):]
    assert "INFERENCE_NUM_THREADS=1" in fold and esc(DEFINITIONS["tok/s"]) in fold
    assert "INFERENCE_NUM_THREADS" not in html[:html.index('<details class="how-measured">')]
