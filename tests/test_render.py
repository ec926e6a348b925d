"""The page's HTML: model output is always text, marks add up, the chart has two lines."""

import re
from html import unescape

from demo.core.metrics import side_stats
from demo.core.streaming import BASELINE, SPECULATIVE, Chunk
from demo.web.render import (acceptance_histogram_svg, baseline_html, race_chart_svg, speculative_html,
                         stats_html)

NASTY = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "`rm -rf /`", "**bold** & <b>",
         "\"quoted\" 'single'", "</div><div onclick=x>"]


def chunk(side, ids, text, accepted_text="", t=1.0):
    return Chunk(side, tuple(ids), text, accepted_text, t)


def test_model_output_is_escaped_in_both_panels():
    base = [chunk(BASELINE, [i], text) for i, text in enumerate(NASTY)]
    spec = [chunk(SPECULATIVE, [i, i + 100], text, text[:3]) for i, text in enumerate(NASTY)]
    for html in (baseline_html(base), speculative_html(spec)):
        assert "<script" not in html and "<img" not in html and "<b>" not in html
        assert "onclick=x>" not in html and "</div><div" not in html
        # What the visitor reads is exactly the model's text, backticks and all (no markdown).
        assert unescape(re.sub(r"<[^>]*>", "", html)) == "".join(NASTY)


def test_speculative_marks_match_accepted_tokens():
    chunks = [chunk(SPECULATIVE, [1], "A"), chunk(SPECULATIVE, [2, 3, 4], "BCD", "BC"),
              chunk(SPECULATIVE, [5], "E"), chunk(SPECULATIVE, [6, 7, 8, 9, 10], "FGHIJ", "FGHI")]
    html = speculative_html(chunks)
    marks = re.findall(r'class="tok-accepted" data-n="(\d+)">([^<]*)</span>', html)
    # Counted by hand: 2 guesses accepted in step 2 and 4 in step 4, and exactly their text.
    assert marks == [("2", "BC"), ("4", "FGHI")]
    assert re.findall(r'class="tok-main">([^<]*)</span>', html) == ["A", "D", "E", "J"]
    assert html.count('class="tok-main"') == 4  # one token of its own per step
    assert html.count('class="step"') == 4


def test_stats_expose_state_and_tokens():
    chunks = [chunk(BASELINE, [i], "x", t=0.1 * (i + 1)) for i in range(5)]
    html = stats_html(side_stats(chunks, 0.0, 0.5), state="done")
    assert 'data-state="done"' in html and 'data-tokens="5"' in html and "10.0" in html


def test_chart_has_a_line_per_side_and_histogram_counts_steps():
    svg = race_chart_svg({BASELINE: [(0.1, 1), (0.2, 2)], SPECULATIVE: [(0.1, 1), (0.15, 4)]})
    assert 'class="line-baseline"' in svg and 'class="line-speculative"' in svg
    hist = acceptance_histogram_svg([chunk(SPECULATIVE, [1], "a"), chunk(SPECULATIVE, [2, 3], "bc", "b"),
                                     chunk(SPECULATIVE, [4, 5], "de", "d"), chunk(SPECULATIVE, [6], "f")])
    assert hist.count("<rect") == 2  # steps that accepted 0 and 1 tokens


def test_why_names_the_fastest_configuration_without_a_draft_and_the_reference():
    from demo.core.explain import explain
    from demo.core.streaming import RunResult
    from demo.web.render import why_html

    why = explain(RunResult("baseline", 0.0, 1.0), RunResult("speculative", 0.0, 1.0), 1.5, 4,
                  calibration={"fastest_alone": "int4_sym main alone, 14.0 tok/s", "reference": "llama.cpp, 12 tok/s"})
    text = unescape(re.sub(r"<[^>]+>", " ", why_html(why)))
    assert "Fastest configuration without a draft: int4_sym main alone, 14.0 tok/s." in text
    assert "Reference: llama.cpp, 12 tok/s." in text


def test_the_verdict_line_puts_the_speculative_rate_first_as_its_speedup_reads():
    from types import SimpleNamespace

    from demo.web.render import summary_html

    class Summary(SimpleNamespace):  # what the line needs of demo.engine.arena.Summary; the rest absent
        def __getattr__(self, name):
            return None

    summary = Summary(speedup=1.5, speculative=SimpleNamespace(tokens_per_s=30.0, steps=0, accepted=0),
                      baseline=SimpleNamespace(tokens_per_s=20.0), verdict="identical", errors={}, how="")
    text = unescape(re.sub(r"<[^>]+>", "", summary_html(summary)))
    assert "1.50× speedup (30.0 vs 20.0 tok/s)" in text  # speculative ÷ baseline, in that order
