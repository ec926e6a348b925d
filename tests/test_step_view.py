"""The step view and the acceptance curve as HTML (demo.web.step_view): hand-made steps and
chunks, no model. Token texts come from the model: they must show as text, never as markup."""

import html
import re

from demo.core.acceptance import StepCosts, curve_of_chunks, payoff
from demo.core.settings import GenerationSettings
from demo.core.streaming import SPECULATIVE, Chunk
from demo.engine.steps import StepReport, check_steps
from demo.web import step_view

TEXTS = {1: "def", 2: " f", 3: "(<script>alert(1)</script>", 4: ":", 5: "\n", 6: " return", 7: "<b>", 8: "x",
         9: "<img src=x onerror=alert(2)>", 10: "y"}


def report():
    # K=3. Step 1: kept 1 of the guesses (1, 7, 9), the main model's own token 2 (rejected 7, 9).
    # Step 2: kept all three (3, 4, 5), bonus token 6. Step 3 (last): the reconstruction
    # "proposes" 8 where the run kept 10: planted, so it differs from the run.
    chunk_ids = [(1, 2), (3, 4, 5, 6), (10, 8)]
    proposals = [(1, 7, 9), (3, 4, 5), (8, 8, 8)]
    return StepReport(tuple(check_steps(chunk_ids, proposals)), TEXTS, complete=True, seconds=0.1)


def items(page: str) -> list:
    return re.findall(r"<li[^>]*>.*?</li>", page)


def test_steps_show_kept_thrown_away_and_own_tokens_escaped():
    page = step_view.steps_html(report())
    first, second, third = items(page)
    # kept guess in blue, the rest of the proposal struck through, the main model's own in orange
    assert '<span class="tok tok-accepted">def</span>' in first
    assert ('<del><span class="tok">&lt;b&gt;</span><span class="tok">&lt;img src=x onerror=alert(2)&gt;</span></del>'
            in first)
    assert first.endswith('<span class="tok tok-main"> f</span></li>')
    assert "<del>" not in second and "↵" in second  # every guess kept; a line break shown as ↵
    assert "&lt;script&gt;" in second and "<script>" not in page and "<img" not in page and "<b>" not in page
    # The planted step is marked, and counted.
    assert 'data-matches="false"' in third and "reconstructed; differs from the run" in third
    # What the run kept is shown as the run kept it (10: "y"), not as the reconstruction guessed it.
    assert '<span class="tok tok-accepted">y</span><del><span class="tok">x</span><span class="tok">x</span></del>' in third
    assert 'data-differ="1"' in page and "match what the run kept on 2 of 3" in html.unescape(page)


def test_a_sentence_instead_of_steps_is_escaped():
    page = step_view.steps_html(note="Turn <sampling> off")
    assert "&lt;sampling&gt;" in page and 'data-steps="0"' in page
    assert step_view.steps_html() == ""


def chunks(*sizes):
    return [Chunk(SPECULATIVE, tuple(range(n)), "x" * n, "", float(i)) for i, n in enumerate(sizes)]


def test_the_curve_beside_the_histogram():
    run = chunks(1, 4, 1, 2, 3, 4, 2)
    page = step_view.charts_html(run, GenerationSettings(assistant_tokens=3))
    assert page.index('class="accept-hist"') < page.index('id="acceptance-curve"')
    bars = re.findall(r'data-position="(\d)" data-rate="([\d.]*)" data-reached="(\d+)" data-kept="(\d+)"', page)
    assert bars == [("1", "0.8333", "6", "5"), ("2", "0.7500", "4", "3"), ("3", "0.6667", "3", "2")]
    assert 'data-tokens-per-step="2.8750"' in page and "2.88 tokens per verify step with K=3" in page
    assert "last step may have been cut" in page
    # With calibrated costs the page says where one more guess stops paying.
    curve = curve_of_chunks(run, 3)
    costs = StepCosts(draft_s=0.01, verify_s=(0.030, 0.032, 0.034, 0.036))
    with_costs = step_view.curve_html(curve, payoff(curve, costs))
    assert 'data-stops-paying-at="2"' in with_costs and "stops paying after K=2" in with_costs


def test_the_curve_without_a_fixed_k_or_steps():
    assert "fixed number of assistant tokens" in step_view.charts_html(
        chunks(1, 3, 2), GenerationSettings(assistant_tokens=None, confidence_threshold=0.4))
    assert step_view.charts_html(chunks(1), GenerationSettings()) == ""  # no step: no histogram, no curve
    assert "No verify step" in step_view.curve_html(curve_of_chunks([], 2))
    assert "counts as a miss" in step_view.curve_html(curve_of_chunks(chunks(1, 2, 1), 2), method="prompt_lookup")
