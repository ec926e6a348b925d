"""The acceptance curve by position (demo.core.acceptance), checked against arithmetic done
by hand here, not by the module's own helpers."""

import pytest

from demo.core.acceptance import StepCosts, acceptance_curve, curve_of_chunks, payoff, pooled
from demo.core.streaming import SPECULATIVE, Chunk


def chunks(*sizes):
    return [Chunk(SPECULATIVE, tuple(range(n)), "x" * n, "", float(i)) for i, n in enumerate(sizes)]


# The prompt's step (1 token), then verify steps of K=3: kept 3, 0, 1, 2, 3, and a last step
# of 2 tokens that may have been cut by max new tokens (censored).
RUN = chunks(1, 4, 1, 2, 3, 4, 2)


def test_the_curve_by_hand():
    c = curve_of_chunks(RUN, 3)
    # guess 1: reached in all 6 verify steps, kept in all but the step of 1 token
    # guess 2: reached where guess 1 was kept, except the censored last step: 4 steps
    #          (sizes 4, 2, 3, 4); kept in the steps of 4, 3, 4
    # guess 3: reached in the steps of 4, 3, 4; kept in the two steps of 4
    assert [p.reached for p in c.positions] == [6, 4, 3]
    assert [p.kept for p in c.positions] == [5, 3, 2]
    assert c.rates() == pytest.approx([5 / 6, 3 / 4, 2 / 3])
    assert c.steps == 6 and c.censored
    assert c.tokens_per_step(1) == pytest.approx(1 + 5 / 6)
    assert c.tokens_per_step(3) == pytest.approx(1 + 5 / 6 + 5 / 6 * 3 / 4 + 5 / 6 * 3 / 4 * 2 / 3)  # 2.875
    assert c.as_dict()["tokens_per_step"][-1] == pytest.approx(2.875)


def test_a_short_last_step_is_censored_not_a_rejection():
    censored = curve_of_chunks(RUN, 3)
    # Counted as a rejection, the last step (1 guess kept) would add a reach of guess 2.
    uncensored = acceptance_curve([4, 1, 2, 3, 4, 2], 3, last_censored=False)
    assert censored.positions[1].reached == 4 and uncensored.positions[1].reached == 5
    assert uncensored.positions[1].rate == pytest.approx(3 / 5)
    # A full last step says the same either way.
    assert acceptance_curve([2, 4], 3).rates() == acceptance_curve([2, 4], 3, last_censored=False).rates()


def test_k_of_one():
    c = curve_of_chunks(chunks(1, 2, 1, 2, 1), 1)
    # verify steps 2, 1, 2 and a censored last step of 1 token (no guess counted)
    assert [(p.reached, p.kept) for p in c.positions] == [(3, 2)]
    assert c.tokens_per_step() == pytest.approx(1 + 2 / 3)


def test_an_empty_run_and_no_fixed_k():
    for run in ([], chunks(1)):
        c = curve_of_chunks(run, 4)
        assert c.steps == 0 and c.rates() == [None] * 4 and c.tokens_per_step() is None
    assert curve_of_chunks(RUN, None) is None  # a confidence threshold: no fixed K
    assert payoff(curve_of_chunks([], 2), StepCosts(0.01, (0.03, 0.03, 0.03))) is None


def test_a_guess_never_reached_does_not_hide_tau():
    # Guess 1 always rejected: guess 2 is never reached, and τ is exactly 1.
    c = acceptance_curve([1, 1, 1], 2, last_censored=False)
    assert c.rates() == [0.0, None] and c.tokens_per_step() == 1.0


def test_pooled_adds_counts_not_rates():
    a, b = acceptance_curve([2, 1], 1, last_censored=False), acceptance_curve([2, 2, 2, 2], 1, last_censored=False)
    p = pooled([a, b])
    assert p.positions[0].rate == pytest.approx(5 / 6)  # averaging the rates would say 3/4
    assert pooled([a, acceptance_curve([2], 2)]) is None
    assert type(p).from_dict(p.as_dict()) == p


def test_where_one_more_guess_stops_paying():
    c = curve_of_chunks(RUN, 3)
    costs = StepCosts(draft_s=0.01, verify_s=(0.030, 0.032, 0.034, 0.036))
    pay = payoff(c, costs)
    # k=1: (1 + 5/6) / (0.01 + 0.032); k=2: 2.4583 / 0.054; k=3: 2.875 / 0.066
    assert pay.tokens_per_s == pytest.approx((43.651, 45.525, 43.561), abs=1e-3)
    assert pay.best_k == 2 and pay.stops_paying_at == 2
    # With a cheap verify every extra guess pays: this run cannot say where it stops.
    cheap = payoff(c, StepCosts(draft_s=0.001, verify_s=(0.03,) * 4))
    assert cheap.best_k == 3 and cheap.stops_paying_at is None
    # The pipeline's overhead per guess counts: 50 ms a guess makes k=1 the best.
    assert payoff(c, StepCosts(0.01, (0.030, 0.032, 0.034, 0.036), per_guess_s=0.05)).stops_paying_at == 1
    # A verify curve shorter than K+1: the k it lacks are unknown, not zero.
    assert payoff(c, StepCosts(0.01, (0.03, 0.03))).tokens_per_s[1:] == (None, None)


def test_step_costs_are_read_from_a_calibration_result():
    from demo.models.calibration_store import step_costs

    from .calibrations import made_up

    overhead = {"main_format": "gguf", "draft_format": "int4_sym", "measured_step_s": {"2": 0.06},
                "predicted_step_s": {"2": 0.05}, "per_step_s": 0.004, "per_guess_s": 0.002, "baseline_step_s": 0.03,
                "baseline_overhead_s": 0.0}
    result = made_up({"race": ("gguf", "int4_sym", 2)},
                     main={"gguf": {"verify_s": {"race": [0.03, 0.032, 0.034], "fair": [0.02, 0.021, 0.022]},
                                    "memory_bytes": 1}},
                     draft={"int4_sym": {"step_s": {"race": 0.01, "fair": 0.008}, "memory_bytes": 1}},
                     pipeline_overhead={"race": overhead})
    race = step_costs(result, "gguf", "int4_sym", "race")
    assert race == StepCosts(0.01, (0.03, 0.032, 0.034), 0.004, 0.002)
    assert race.step_s(2) == pytest.approx(2 * 0.01 + 0.034 + 0.004 + 2 * 0.002)
    assert step_costs(result, "gguf", "int4_sym", "fair").per_step_s == 0.0  # no overhead measured: none added
    for missing in ((None, "gguf", "int4_sym"), (result, "f16", "int4_sym"), (result, "gguf", "gguf")):
        assert step_costs(*missing, "race") is None



def test_the_step_view_keeps_the_step_a_real_pipeline_measured_at_its_k():
    # One cost model (issue 59, item 7): where calibration timed a real pipeline at K=2 and it added
    # less than the a + b·K line says (here: below zero, which the line would clip to nothing), the
    # step view's step at K=2 is the timed one, by hand: 2 guesses × 10 ms + a 3-token verify of
    # 34 ms - 5 ms; at an untimed K=3 the line: 3 × 10 + 36 + max(0, -2 + 1 × 3) ms.
    from demo.models.calibration_store import step_costs

    from .calibrations import made_up

    overhead = {"main_format": "m", "draft_format": "d", "measured_step_s": {}, "predicted_step_s": {},
                "extra_s": {"2": -0.005}, "per_step_s": -0.002, "per_guess_s": 0.001, "baseline_step_s": 0.03,
                "baseline_overhead_s": 0.0}
    result = made_up({"fair": ("m", "d", 2)}, pipeline_overhead={"fair": overhead})
    result.main["m"].verify_s["fair"] = [0.030, 0.032, 0.034, 0.036]
    costs = step_costs(result, "m", "d", "fair")
    assert costs.step_s(2) == pytest.approx(2 * 0.010 + 0.034 - 0.005)
    assert costs.step_s(3) == pytest.approx(3 * 0.010 + 0.036 + 0.001)
