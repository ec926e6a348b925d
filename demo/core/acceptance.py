"""The acceptance curve by position, from the streamed step sizes alone (no reconstruction).

Each speculative step streams its kept guesses plus one token of the main model's own, so a
step of c tokens kept c - 1 guesses and, when c - 1 < K, rejected guess c. Guess i was
*reached* in every step that kept guesses 1..i-1; the curve is, for i = 1..K, the share of
those steps that kept guess i too (a conditional rate, as vLLM's per-position metrics).

Two steps are not like the others:
  * the first streamed chunk is the prompt's step: the main model's first token, no guesses;
    it is left out (as the histogram leaves it out);
  * the last step may have been cut by max new tokens or the end of the answer, so a short
    last step does not show a rejection. It is *censored*: it counts as reaching and keeping
    its c - 1 guesses, and it says nothing about guess c.

From the curve a_1..a_K, a step with k ≤ K guesses yields on average
    τ(k) = 1 + a_1 + a_1·a_2 + … + a_1·…·a_k tokens,
the tokens per step of demo.core.metrics (the main model's own token included): the products
telescope to kept_i ÷ steps, so τ(K) is exactly the measured tokens per step when the last
step is not censored, and differs from it only by that one step when it is.
and with calibration's costs (StepCosts) tok/s(k) = τ(k) / step(k), the standard model of
demo.calibrate.cost_model. The rates past the K a run used were never observed: a run says
nothing about whether a larger K pays. Pure arithmetic: no Gradio, no OpenVINO.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

from .metrics import verify_step_sizes


@dataclass(frozen=True)
class Position:
    """Guess `index` (1-based): `reached` steps kept every guess before it, `kept` of those kept it."""

    index: int
    reached: int
    kept: int

    @property
    def rate(self) -> Optional[float]:
        return self.kept / self.reached if self.reached else None


@dataclass(frozen=True)
class AcceptanceCurve:
    k: int                          # guesses per step the run asked for
    positions: tuple[Position, ...]  # 1..k
    steps: int                      # steps counted (the prompt's step left out)
    censored: bool                  # the last step was counted as censored (cut, not rejected)

    def rates(self) -> list[Optional[float]]:
        return [p.rate for p in self.positions]

    def tokens_per_step(self, k: Optional[int] = None) -> Optional[float]:
        """τ(k): expected tokens per step with k guesses (default: the run's K); None when
        a rate it needs was never observed."""
        k = self.k if k is None else k
        total, survive = 1.0, 1.0
        for p in self.positions[:k]:
            if p.rate is None:
                if survive == 0.0:
                    break  # nothing reaches this guess anyway
                return None
            survive *= p.rate
            total += survive
        return total

    def as_dict(self) -> dict:
        return {"k": self.k, "steps": self.steps, "censored_last_step": self.censored,
                "reached": [p.reached for p in self.positions], "kept": [p.kept for p in self.positions],
                "rate": self.rates(),
                "tokens_per_step": [self.tokens_per_step(i) for i in range(1, self.k + 1)]}

    @classmethod
    def from_dict(cls, d: dict) -> "AcceptanceCurve":
        positions = tuple(Position(i + 1, int(r), int(a)) for i, (r, a) in enumerate(zip(d["reached"], d["kept"])))
        return cls(k=int(d["k"]), positions=positions, steps=int(d["steps"]), censored=bool(d["censored_last_step"]))


def acceptance_curve(step_sizes: Sequence[int], k: int, last_censored: bool = True) -> AcceptanceCurve:
    """The curve of one run's verify steps (`step_sizes`: tokens per step, the prompt's step
    already left out). `last_censored`: whether the last step may have been cut."""
    if k < 1:
        raise ValueError("k must be at least 1")
    reached, kept = [0] * k, [0] * k
    n = len(step_sizes)
    for j, size in enumerate(step_sizes):
        good = min(max(size - 1, 0), k)  # guesses this step kept (never more than were made)
        censored = last_censored and j == n - 1
        for i in range(good):
            reached[i] += 1
            kept[i] += 1
        if good < k and not censored:
            reached[good] += 1  # guess good+1 was made and rejected
    return AcceptanceCurve(k=k, positions=tuple(Position(i + 1, reached[i], kept[i]) for i in range(k)),
                           steps=n, censored=last_censored and n > 0)


def curve_of_chunks(chunks: Sequence, k: Optional[int]) -> Optional[AcceptanceCurve]:
    """The curve of a speculative run's chunks (demo.core.streaming.Chunk), or None when it
    has no fixed K (a confidence threshold drafts as many guesses as it likes)."""
    if not k:
        return None
    return acceptance_curve(verify_step_sizes(chunks), k)


def pooled(curves: Iterable[AcceptanceCurve]) -> Optional[AcceptanceCurve]:
    """Several runs with the same K as one curve: counts are added, not rates averaged."""
    curves = list(curves)
    if not curves or len({c.k for c in curves}) != 1:
        return None
    k = curves[0].k
    positions = tuple(Position(i + 1, sum(c.positions[i].reached for c in curves),
                               sum(c.positions[i].kept for c in curves)) for i in range(k))
    return AcceptanceCurve(k=k, positions=positions, steps=sum(c.steps for c in curves),
                           censored=any(c.censored for c in curves))


@dataclass(frozen=True)
class StepCosts:
    """What one speculative step costs on this machine (from its calibration): `draft_s` per
    guess, `verify_s[m - 1]` for a main-model step over m tokens, and the pipeline's own
    overhead per step, `per_step_s` + `per_guess_s`·k (a line that dips below zero adds
    nothing), except at a K where a real pipeline was timed (`timed_extra_s`: K -> what it
    added, below zero too), whose step is then what that pipeline measured. The one cost model:
    calibration's predictions (demo.calibrate.cost_model.predict) and the step view read it."""

    draft_s: float
    verify_s: tuple[float, ...]
    per_step_s: float = 0.0
    per_guess_s: float = 0.0
    timed_extra_s: tuple[tuple[int, float], ...] = ()  # ((K, seconds), ...): hashable, frozen

    def step_s(self, k: int) -> Optional[float]:
        if k >= len(self.verify_s):
            return None
        timed = dict(self.timed_extra_s)
        extra = timed[k] if k in timed else max(0.0, self.per_step_s + self.per_guess_s * k)
        return k * self.draft_s + self.verify_s[k] + extra


@dataclass(frozen=True)
class Payoff:
    """Predicted tok/s for k = 1..K guesses from this run's curve, and where one more stops paying."""

    tokens_per_s: tuple[Optional[float], ...]  # index k - 1
    best_k: Optional[int]
    # The smallest k where k + 1 guesses are predicted no faster; None if every extra guess
    # up to the run's K still paid (a larger K might pay too: this run cannot tell).
    stops_paying_at: Optional[int]


def payoff(curve: AcceptanceCurve, costs: StepCosts) -> Optional[Payoff]:
    speeds: list[Optional[float]] = []
    for k in range(1, curve.k + 1):
        tau, step = curve.tokens_per_step(k), costs.step_s(k)
        speeds.append(tau / step if tau is not None and step else None)
    known = [(s, k) for k, s in enumerate(speeds, 1) if s is not None]
    if not known:
        return None
    stops = next((k for k in range(1, curve.k) if speeds[k - 1] is not None and speeds[k] is not None
                  and speeds[k] <= speeds[k - 1]), None)
    return Payoff(tokens_per_s=tuple(speeds), best_k=max(known)[1], stops_paying_at=stops)
