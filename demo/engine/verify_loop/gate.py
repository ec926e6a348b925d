"""How many tokens each step verifies: the choice that gives the most tokens per second on
this machine's own measured costs, so a method that cannot pay falls back to plain decoding.

Two costs decide it, both measured on the machine (runner.time_widths) and followed as the
steps run:
* `costs[m-1]`: one infer over m new tokens when the step before had m too (steady);
* `switch_s`: what changing m from one step to the next adds. On a Zen 4 (2026-12-06) an infer
  after one of another width cost 6-11 ms more (the CPU plugin prepares its kernels for the new
  shape; scripts/experiments/kv_trim_and_width.py). A gate blind to it drafts at a loss; with
  it, it holds a width while guesses keep coming.

With guesses of a kind accepted with probability p each (geometric: a guess counts only if all
before it did), j guesses give 1 + p + … + p^j tokens. p is learned per kind of guess (a long
n-gram match, a datastore continuation most occurrences agree on, …) from a prior that lets
every kind be tried a little, and carried from answer to answer (how often a kind holds, never
what an answer said)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

# How much better a wider step's predicted rate must be than one token alone: below this the
# prediction's own error (a few percent) could make drafting the slower choice.
MARGIN = 1.03
# The prior for a kind not yet seen: as if 1 of 2 guesses had been accepted.
PRIOR_ACCEPTED, PRIOR_TRIED = 1.0, 2.0
# How fast measured costs follow the machine (exponential moving average weight).
COST_EWMA = 0.1
# The check on the outcome: after this many wider steps in an answer, their real tokens per
# second are held against one token alone's; a shortfall raises the margin by as much.
CHECKED_AFTER = 6


@dataclass
class Decision:
    width: int               # tokens the step feeds: the last token and width-1 guesses
    guesses: int             # of which come from the proposal (the rest pad the step to its width)
    predicted_tokens: float
    predicted_rate: float    # tokens per second, predicted
    plain_rate: float        # one token alone, from this step's position


@dataclass
class Gate:
    """`costs[m-1]`: seconds for one steady infer over m new tokens, m = 1 … len(costs)."""

    costs: list[float]
    switch_s: float = 0.0
    margin: float = MARGIN
    accepted: dict[str, float] = field(default_factory=dict)
    tried: dict[str, float] = field(default_factory=dict)
    width: int = 1           # the last step's width
    wide_tokens: int = 0     # tokens the answer's wider steps kept, and the seconds they took
    wide_s: float = 0.0
    wide_steps: int = 0

    def __post_init__(self):
        if not self.costs or any(c <= 0 for c in self.costs) or self.switch_s < 0:
            raise ValueError("the gate needs a positive cost for every verify width")

    @property
    def max_guesses(self) -> int:
        return len(self.costs) - 1

    def acceptance(self, kind: str) -> float:
        return (self.accepted.get(kind, 0.0) + PRIOR_ACCEPTED) / (self.tried.get(kind, 0.0) + PRIOR_TRIED)

    def step_cost(self, width: int) -> float:
        return self.costs[width - 1] + (self.switch_s if width != self.width else 0.0)

    def decide(self, kind: Optional[str], available: int) -> Decision:
        plain = 1.0 / self.step_cost(1)
        best = Decision(1, 0, 1.0, plain, plain)
        p = self.acceptance(kind) if kind is not None and available > 0 else 0.0
        tokens, run = 1.0, 1.0
        for width in range(2, len(self.costs) + 1):
            guesses = min(width - 1, available if kind is not None else 0)
            if guesses == width - 1:  # a real guess in this slot (else the step is padded)
                run *= p
                tokens += run
            rate = tokens / self.step_cost(width)
            if rate > best.predicted_rate:
                best = Decision(width, guesses, tokens, rate, plain)
        # Leaving one token alone must clearly pay; staying at the width held needs no margin,
        # since going back costs a switch of its own.
        if best.width != 1 and self.width == 1 and best.predicted_rate < plain * self.margin * self.shortfall():
            return Decision(1, 0, 1.0, plain, plain)
        return best

    def shortfall(self) -> float:
        """How far the answer's wider steps really fell short of one token alone (1.0: not at all,
        or too few to tell). The model above can be wrong (costs gone stale, acceptance that
        drifts); this is the outcome itself, so a method that loses on an answer stops drafting."""
        if self.wide_steps < CHECKED_AFTER or self.wide_s <= 0:
            return 1.0
        return max(1.0, (1.0 / self.costs[0]) / (self.wide_tokens / self.wide_s))

    def outcome(self, width: int, tokens: int, seconds: float) -> None:
        """A real step of `width` kept `tokens` in `seconds` (its switch included)."""
        if width > 1:
            self.wide_steps += 1
            self.wide_tokens += tokens
            self.wide_s += seconds

    def learn(self, kind: str, verified: int, accepted: int) -> None:
        """`verified` guesses of `kind` went to the main model and the first `accepted` matched."""
        if verified <= 0:
            return
        # Geometric trials: every accepted guess is a success, the first rejected one a failure;
        # guesses after it were never really tried.
        self.accepted[kind] = self.accepted.get(kind, 0.0) + accepted
        self.tried[kind] = self.tried.get(kind, 0.0) + accepted + (1 if accepted < verified else 0)

    def timed(self, width: int, seconds: float) -> None:
        """A step over `width` new tokens took `seconds` after one of `self.width` (the caller then
        sets `width`): the costs the gate plans with follow it."""
        if not (1 <= width <= len(self.costs) and seconds > 0):
            return
        if width == self.width:
            self.costs[width - 1] += COST_EWMA * (seconds - self.costs[width - 1])
        else:
            extra = max(0.0, seconds - self.costs[width - 1])
            self.switch_s += COST_EWMA * (extra - self.switch_s)

    def carried(self, weight: float = 0.5) -> "Gate":
        """A gate for the next answer: these costs, and what was learned of each kind at `weight`."""
        return Gate(list(self.costs), self.switch_s, self.margin, {k: v * weight for k, v in self.accepted.items()},
                    {k: v * weight for k, v in self.tried.items()})


def best_proposal(gate: Gate, proposals: Sequence) -> tuple[Optional[object], Decision]:
    """The proposal (and the step's width) with the best predicted rate; (None, the best width
    without a guess) when none pays."""
    chosen, decision = None, gate.decide(None, 0)
    for proposal in proposals:
        if proposal is None:
            continue
        d = gate.decide(proposal.kind, len(proposal.tokens))
        if d.guesses and d.predicted_rate > decision.predicted_rate:
            chosen, decision = proposal, d
    return chosen, decision
