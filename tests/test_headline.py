"""The headline's arithmetic (lab.paired, used by scripts/headline.py), on hand-made token times: rates after the first token,
compared at equal token counts, ratios paired per (round, prompt) and never inverted."""

import pytest

from lab import paired as h
from lab.paired import decode_rate


def test_decode_rate_leaves_the_first_token_out_and_cuts_at_n():
    # First token at 1.0 s (the prefill), then one every 0.1 s: 10 tok/s after the first.
    times = [1.0 + 0.1 * i for i in range(11)]
    assert decode_rate(times) == pytest.approx(10.0)
    # A slow tail (tokens 7..11 every 0.5 s): cut at 6 tokens, the rate is the fast part's.
    slow_tail = times[:6] + [times[5] + 0.5 * i for i in range(1, 6)]
    assert decode_rate(slow_tail, 6) == pytest.approx(10.0)
    assert decode_rate(slow_tail) == pytest.approx(10 / 3.0)
    assert decode_rate([1.0]) is None and decode_rate([]) is None


def test_pairs_are_cut_at_the_shorter_answer_and_the_ratio_is_a_over_b():
    fast = [0.5 + 0.05 * i for i in range(100)]   # 20 tok/s, 100 tokens
    slow = [0.5 + 0.1 * i for i in range(40)]     # 10 tok/s, stops at 40 tokens
    # The fast side slows down after token 40: over ALL its tokens its rate would be lower.
    fast = fast[:40] + [fast[39] + 0.2 * i for i in range(1, 61)]
    (row,) = h.paired([{"round": 0, "prompt": "p", "times": {"spec": fast, "base": slow}}], "spec", "base")
    assert row["tokens"] == 40
    assert row["spec"] == pytest.approx(20.0) and row["base"] == pytest.approx(10.0)
    assert row["ratio"] == pytest.approx(2.0)  # spec ÷ base, not the other way round
    assert h.spread([1.0, 3.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}


def test_against_the_fastest_plain_engine_of_each_sample():
    """The speculative side over whichever plain configuration was faster in that sample, all
    three cut at the shortest answer."""
    spec = [0.1 * i for i in range(50)]       # 10 tok/s
    pa = [0.2 * i for i in range(30)]         # 5 tok/s, the shortest: every rate over 30 tokens
    sdpa = [0.25 * i for i in range(50)]      # 4 tok/s ...
    sdpa_fast = [0.125 * i for i in range(50)]  # ... or 8 tok/s
    rows = h.against_fastest([{"round": 0, "prompt": "p", "times": {"spec": spec, "pa": pa, "sdpa": sdpa}},
                              {"round": 0, "prompt": "q", "times": {"spec": spec, "pa": pa, "sdpa": sdpa_fast}}],
                             "spec", ["pa", "sdpa"])
    assert [r["tokens"] for r in rows] == [30, 30]
    assert [r["fastest"] for r in rows] == ["pa", "sdpa"]
    assert [r["ratio"] for r in rows] == [pytest.approx(2.0), pytest.approx(1.25)]


def test_the_spread_of_paired_ratios_is_their_median_not_their_mean():
    # One disturbed pair (a machine's drift) must not move the figure a headline reports.
    assert h.spread([1.0, 1.1, 9.0]) == {"median": 1.1, "min": 1.0, "max": 9.0, "n": 3}


def test_the_headline_never_reports_on_a_prompt_calibration_tunes_on():
    """Prompt sets that never meet (issue 59, item 2): calibration chooses on code-1 and code-2
    (its command line's default classes and count are that set), the headline's prompts are the
    others, and a calibration prompt handed to the headline is refused in one sentence."""
    import subprocess
    import sys

    from demo.calibrate import calibration
    from demo.core import bench_prompts as bp
    from demo.core.errors import DemoError

    assert bp.CALIBRATION_SET == ("code-1", "code-2")
    assert [p.id for p in bp.select(calibration.DEFAULT_PROMPT_CLASSES,
                                    calibration.DEFAULT_PROMPTS_PER_CLASS)] == list(bp.CALIBRATION_SET)
    assert not set(bp.CALIBRATION_SET) & set(bp.HEADLINE_SET)
    assert [p.id for p in bp.held_out(bp.named(bp.HEADLINE_SET))] == ["code-3", "code-4", "code-5"]
    with pytest.raises(DemoError, match="code-1 is one of calibration's prompts"):
        bp.held_out(bp.named(["code-3", "code-1"]))
    # Asking the headline for more prompts than the held-out set has is refused, not filled with calibration's.
    out = subprocess.run([sys.executable, "scripts/headline.py", "--prompts", "4"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and "invalid choice: 4" in out.stderr, out.stderr
