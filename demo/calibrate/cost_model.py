"""The standard model of speculative decoding (Leviathan et al.), with a real pipeline's
overhead per step: from measured step costs and the draft's agreement with the main model's
answers, the tok/s of every format pair and K, and the choice among them. Pure arithmetic.

    speculative tok/s = τ(K) / (K·draft + verify(K+1) + overhead(K))
"""

from __future__ import annotations

from typing import Callable, Mapping, Optional, Sequence

from ..core.acceptance import StepCosts
from ..models.calibration_result import split_plain_key


def agreement_runs(guesses: Sequence[int], answer: Sequence[int]) -> list[int]:
    """runs[p]: how many of answer[p], answer[p+1], … the draft guesses right in a row."""
    runs = [0] * (len(answer) + 1)
    for p in range(len(answer) - 1, -1, -1):
        runs[p] = runs[p + 1] + 1 if guesses[p] == answer[p] else 0
    return runs[:-1]


def verify_steps(runs: Sequence[int], k: int) -> int:
    """Main-model steps speculative decoding with K guesses needs after the prompt's step
    (which gives answer[0]): each step keeps the guesses up to the first wrong one and
    adds the main model's own next token."""
    p, steps = 1, 0
    while p < len(runs):
        p += min(runs[p], k) + 1
        steps += 1
    return steps


def tokens_per_step(answers_runs: Sequence[Sequence[int]], k: int) -> float:
    """τ(K): tokens each verify step yields, over all the calibration answers."""
    tokens = sum(len(r) - 1 for r in answers_runs)
    steps = sum(verify_steps(r, k) for r in answers_runs)
    return tokens / steps if steps else 1.0


def predict(verify: Sequence[float], draft_step: float, answers_runs: Sequence[Sequence[int]], k: int,
            overhead: Sequence[float] = (0.0, 0.0), baseline_overhead: float = 0.0,
            timed_extra: Optional[Mapping[int, float]] = None) -> dict:
    """Standard model: tok/s of the main model alone and of speculation with K guesses.

    `verify[M - 1]` is the cost of one main-model step of M tokens; `overhead` = (a, b):
    what a real speculative pipeline adds to each step, a + b·K seconds (a line that dips
    below zero adds nothing), except at a K of `timed_extra`, where a real pipeline was timed
    and added that, below zero too: its step is then what the real pipeline measured (where
    the bare costs read high, as a host drifted, a launch on a Zen 4 otherwise predicted the
    K=2 it had timed at 31.4 tok/s as 26.6 and chose an untimed K=1 at 29.2: BENCHMARKS.md);
    `baseline_overhead` what a real baseline pipeline adds to each token (pipeline_overhead)."""
    tau = tokens_per_step(answers_runs, k)
    step = StepCosts(draft_step, tuple(verify), overhead[0], overhead[1],
                     tuple(sorted((timed_extra or {}).items()))).step_s(k)
    return {"k": k, "tokens_per_step": tau, "step_s": step,
            "speculative_tok_s": tau / step, "baseline_tok_s": 1.0 / (verify[0] + max(0.0, baseline_overhead))}


def dominated(fair_curve: Sequence[float], mains: dict, drafts: dict, runs: dict, k_max: int) -> bool:
    """True if a main format whose fair-mode curve is `fair_curve` cannot win: alone it is
    slower than a format measured before, and even with the best tokens per step any
    measured pair reached (plus 10 %) and the cheapest draft, speculation on it is slower
    than the best prediction so far. Nothing is dominated before one format is measured."""
    measured = {key: r for key, r in runs.items() if not mains.get(key[0], {}).get("dominated", True)}
    if not measured:
        return False
    if 1 / fair_curve[0] > max(1 / mains[mf]["verify_s"]["fair"][0] for mf, _ in measured):
        return False
    cheapest = min(d["step_s"]["fair"] for d in drafts.values())
    bound = max(1.1 * max(tokens_per_step(r, k) for r in measured.values()) / (k * cheapest + fair_curve[k])
                for k in range(1, k_max + 1))
    best = max(predict(mains[mf]["verify_s"]["fair"], drafts[df]["step_s"]["fair"], r, k)["speculative_tok_s"]
               for (mf, df), r in measured.items() for k in range(1, k_max + 1))
    return bound < best


# Closer than this to the fastest, calibration cannot tell configurations apart.
TIE_MARGIN = 0.03


def pick_among_fastest(fitting: Sequence[dict], preferred_mains: Sequence[str] = ()) -> dict:
    """Among the configurations within TIE_MARGIN of the fastest predicted speculative rate,
    one whose main format is in `preferred_mains` (those tied for the fastest without a
    draft, plain_choice), so that the baseline can run the same main weights; then the
    fastest. Never the largest speedup over its own main: a main that is slow alone makes
    that ratio large and the comparison dishonest (issue 29)."""
    fastest_tok_s = max(c["speculative_tok_s"] for c in fitting)
    near = [c for c in fitting if c["speculative_tok_s"] >= (1 - TIE_MARGIN) * fastest_tok_s]
    return max(near, key=lambda c: (c["main_format"] in preferred_mains, c["speculative_tok_s"]))


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def ties_with(samples: Sequence[float], best: Sequence[float]) -> bool:
    """Whether a configuration's paired samples (same round, same prompt) cannot be told
    from the best one's: their median ratio is within TIE_MARGIN. One pair that had it at
    least as fast is not enough: a launch's two samples on a Zen 4 read int4_sym on paged
    attention 0.60x and 1.04x int4_channel on SDPA, the page raced the pair against
    int4_sym as a tie, and interleaved the fastest plain configuration ran 1.38x it
    (BENCHMARKS.md): a baseline slower than the machine's best."""
    ratios = [a / b for a, b in zip(samples, best) if b > 0]
    return bool(ratios) and median(ratios) >= 1 - TIE_MARGIN


def plain_choice(rates: dict, paired: bool = True) -> dict:
    """The fastest main format without a draft, from real-pipeline samples ({format: [tok/s per
    round and prompt]}): {"main_format", "baseline_tok_s" (its median), "ties": formats that
    cannot be told from it, itself included}. A tie is read from paired samples only: timed one
    after another (`paired` False: the pipelines did not fit in memory together), the samples
    of two formats met different moments of the machine's drift, and none ties with the fastest."""
    medians = {f: median(v) for f, v in rates.items() if v}
    best = max(medians, key=medians.get)
    ties = [f for f in medians if f == best or (paired and ties_with(rates[f], rates[best]))]
    return {"main_format": best, "baseline_tok_s": medians[best], "ties": ties}


# The stateful backend runs the baseline only where it beats paged attention by this much in
# every paired sample: its answers part from the speculative side's sooner (other attention
# kernels), and on a Zen 5 the two ran 0.97-1.14x in seven interleaved measurements, a tie
# (BENCHMARKS.md). The same bar as the activation precision's (demo.calibrate.precision).
STATEFUL_MARGIN = 0.05


def paged_unless_clearly_slower(pick: dict, rates: dict, paired: bool = True) -> dict:
    """plain_choice's pick, unless it is a configuration on the stateful backend that did not
    beat the fastest configuration on paged attention by STATEFUL_MARGIN in every paired
    sample: then that paged configuration (the fastest of them, not the pick's own format on
    paged attention, which may be slower than another format there), counted among the ties.
    "stateful_ratios": the pairs read; samples not `paired` give one ratio, of their medians."""
    _, attention = split_plain_key(pick["main_format"])
    paged = {k: v for k, v in rates.items() if v and split_plain_key(k)[1] == "PA"}
    if attention == "PA" or not paged:
        return pick
    fastest_paged = plain_choice(paged, paired)
    ours, theirs = rates[pick["main_format"]], rates[fastest_paged["main_format"]]
    ratios = ([s / p for s, p in zip(ours, theirs) if p > 0] if paired
              else [median(ours) / median(theirs)] if median(theirs) > 0 else [])
    if ratios and min(ratios) >= 1 + STATEFUL_MARGIN:
        return {**pick, "stateful_ratios": ratios}
    return {**fastest_paged, "ties": list(dict.fromkeys([*pick["ties"], *fastest_paged["ties"]])),
            "stateful_ratios": ratios}


# A main whose bare model takes this many times the fastest one's token cannot be the fastest
# without a draft, beyond any drift these machines show (a quarter at most, within minutes).
PLAIN_MARGIN = 1.5


def plain_contenders(mains: dict) -> list[str]:
    """The main formats worth timing alone in a real pipeline ({format: measure_main's result}):
    all but those whose bare model's fair one-token cost is over PLAIN_MARGIN × the cheapest
    (one without a fair curve stays: nothing says it is slow)."""
    cost = {f: m["verify_s"]["fair"][0] for f, m in mains.items() if m.get("verify_s", {}).get("fair")}
    cheapest = min(cost.values(), default=0.0)
    return [f for f in mains if f not in cost or cost[f] <= PLAIN_MARGIN * cheapest]


# A main whose real baseline pipeline ran at under 1/RACE_MARGIN of the fastest one's rate with
# the whole machine (formats interleaved, so drift cancels) is not timed alone with race threads:
# between the two thread counts a format's rate relative to the fastest moved by 8 % at most
# (5 formats, AMX Xeon and Zen 4 calibrations: 0.39 -> 0.42, 0.66 -> 0.58, 0.66 -> 0.70,
# 0.73 -> 0.65, 0.78 -> 0.63), a third of what overtaking it would need.
RACE_MARGIN = 1.25


def race_contenders(fair_rates: dict, formats: list[str]) -> list[str]:
    """Of `formats`, those worth timing alone with race threads, given the fair-threads timing
    ({format: [tok/s]}): all but those whose median is under 1/RACE_MARGIN × the fastest's
    (one not timed with fair threads stays: nothing says it is slow)."""
    medians = {f: median(v) for f, v in fair_rates.items() if v}
    fastest = max(medians.values(), default=0.0)
    return [f for f in formats if f not in medians or medians[f] * RACE_MARGIN >= fastest]


def overhead_ks(k_max: int, with_k1: bool = True) -> tuple[int, ...]:
    """The K a real pipeline is timed at: the two its overhead line goes through, and 1
    unless `with_k1` is False (1, 2, 6 for K up to 8). K=1's own step is worth timing: a real
    step is not linear in K there, and the line through the larger K misses it."""
    lo = max(1, k_max // 4)
    line = (lo, max(lo + 1, 3 * k_max // 4))
    return tuple(sorted({1, *line} if with_k1 else line))


def fit_overhead(measured_step_s: dict, predicted_step_s: Callable[[int], float]) -> tuple[float, float]:
    """(a, b): the line a + b·K through what real steps took beyond the model's step at the
    two largest K measured."""
    (k0, m0), (k1, m1) = sorted(measured_step_s.items())[-2:]
    extra0, extra1 = m0 - predicted_step_s(k0), m1 - predicted_step_s(k1)
    per_guess = (extra1 - extra0) / (k1 - k0)
    return extra0 - per_guess * k0, per_guess


def pair_of(candidate: dict) -> tuple:
    return candidate["main_format"], candidate["draft_format"]


def choose_timed(first: tuple, time_pipeline: Callable[[tuple], dict],
                 pool_for: Callable[[Callable[[tuple], dict]], list], pick: Callable[[list], dict]):
    """(choice, its pool, {pair: timing}): the pick among `pool_for`'s candidates once every
    pair is predicted with a real pipeline's overhead, that of its own pair where it was
    timed and the first pair's otherwise. Whenever the pick is a pair not yet timed, that
    pair is timed and the pick made again: each pair at most once, so it ends, and the
    chosen pair's prediction always carries its own measured overhead."""
    timed = {first: time_pipeline(first)}
    while True:
        pool = pool_for(lambda pair: timed.get(pair, timed[first]))
        best = pick(pool)
        if pair_of(best) in timed:
            return best, pool, timed
        timed[pair_of(best)] = time_pipeline(pair_of(best))
