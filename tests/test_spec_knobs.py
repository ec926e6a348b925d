"""scripts/experiments/spec_knobs.py's design (BENCHMARKS.md's levers): variants run ABBA, so a
drift across a round cancels over an even number of rounds, and ratios are paired by round and
prompt."""

import sys
from itertools import combinations
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts" / "experiments"))

import spec_knobs  # noqa: E402


def test_every_variant_runs_first_and_last_equally_often_over_an_even_number_of_rounds():
    names = ["base", "base-dn", "spec", "spec-dn"]
    orders = [spec_knobs.round_order(names, r) for r in range(4)]
    assert all(sorted(o) == sorted(names) for o in orders)
    for a, b in combinations(names, 2):
        a_first = sum(o.index(a) < o.index(b) for o in orders)
        assert a_first == 2, (a, b, orders)
    # The mean position is the same for every variant: a linear drift hits each alike.
    assert len({sum(o.index(n) for o in orders) for n in names}) == 1


def test_a_linear_drift_reads_as_no_gain_between_identical_variants():
    """Two identical variants on a machine that slows by 1 % a slot: paired over ABBA rounds,
    their ratios' product is exactly 1, where one order for every round would read a loss."""
    names, slot, rate = ["a", "b"], 0, {}
    runs = {n: [] for n in names}
    for r in range(4):
        for n in spec_knobs.round_order(names, r):
            runs[n].append({"decode_tok_s": 40.0 * 0.99 ** slot})
            slot += 1
    ratios = spec_knobs.paired_ratios(runs["b"], runs["a"])
    product = 1.0
    for x in ratios:
        product *= x
    assert product == pytest.approx(1.0)
    assert ratios[0] < 1 < ratios[1]


def test_paired_ratios_refuse_runs_of_different_lengths():
    with pytest.raises(ValueError):
        spec_knobs.paired_ratios([{"decode_tok_s": 1.0}], [])
