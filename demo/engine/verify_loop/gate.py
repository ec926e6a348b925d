"""Whether a step drafts at all, and how many guesses it verifies: the choice that gives the
most tokens per second on this machine's own measured costs.

A step that verifies m tokens (the last token and m-1 guesses) costs `cost(m)`; with guesses of
a kind accepted with probability p each (geometric: a guess counts only if all before it did),
j guesses give 1 + p + … + p^j tokens. The gate compares (tokens / cost) for every j against a
plain step's 1 / cost(1) and drafts only when a chain clearly wins, so a method that cannot pay
on this CPU falls back to plain decoding instead of losing to it.

p is learned per kind of guess (an n-gram match of length 3, a datastore match, …) as the
answer goes, from a prior that lets every kind be tried a little; the costs start from the
loop's own timing at load and follow what the steps really take."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

# How much better a chain's predicted rate must be than plain decoding's to draft at all:
# below this the prediction's own error (a few percent) could make drafting the slower choice.
MARGIN = 1.03
# The prior for a kind not yet seen: as if 1 of 2 guesses had been accepted.
PRIOR_ACCEPTED, PRIOR_TRIED = 1.0, 2.0
# How fast measured step costs follow the machine (exponential moving average weight).
COST_EWMA = 0.1


@dataclass
class Decision:
    guesses: int          # how many of the proposal's tokens to verify (0 = a plain step)
    predicted_tokens: float
    predicted_rate: float  # tokens per second, predicted
    plain_rate: float


@dataclass
class Gate:
    """`costs[m-1]`: seconds for one infer over m new tokens, m = 1 … len(costs)."""

    costs: list[float]
    margin: float = MARGIN
    accepted: dict[str, float] = field(default_factory=dict)
    tried: dict[str, float] = field(default_factory=dict)

    def __post_init__(self):
        if not self.costs or any(c <= 0 for c in self.costs):
            raise ValueError("the gate needs a positive cost for every verify width")

    @property
    def max_guesses(self) -> int:
        return len(self.costs) - 1

    def acceptance(self, kind: str) -> float:
        return (self.accepted.get(kind, 0.0) + PRIOR_ACCEPTED) / (self.tried.get(kind, 0.0) + PRIOR_TRIED)

    def decide(self, kind: Optional[str], available: int) -> Decision:
        plain = 1.0 / self.costs[0]
        best = Decision(0, 1.0, plain, plain)
        if kind is None or available <= 0:
            return best
        p = self.acceptance(kind)
        tokens, run = 1.0, 1.0
        for j in range(1, min(available, self.max_guesses) + 1):
            run *= p
            tokens += run
            rate = tokens / self.costs[j]
            if rate > best.predicted_rate:
                best = Decision(j, tokens, rate, plain)
        if best.guesses and best.predicted_rate < plain * self.margin:
            return Decision(0, 1.0, plain, plain)
        return best

    def learn(self, kind: str, verified: int, accepted: int) -> None:
        """`verified` guesses of `kind` went to the main model and the first `accepted` matched."""
        if verified <= 0:
            return
        # Geometric trials: every accepted guess is a success; the first rejected one a failure;
        # guesses after it were never really tried.
        self.accepted[kind] = self.accepted.get(kind, 0.0) + accepted
        self.tried[kind] = self.tried.get(kind, 0.0) + accepted + (1 if accepted < verified else 0)

    def carried(self, weight: float = 0.5) -> "Gate":
        """A gate for the next answer: these costs, and what was learned of each kind at `weight`
        (how often a kind of guess holds carries over; the answers themselves never do)."""
        return Gate(list(self.costs), self.margin, {k: v * weight for k, v in self.accepted.items()},
                    {k: v * weight for k, v in self.tried.items()})

    def timed(self, width: int, seconds: float) -> None:
        """A step over `width` new tokens took `seconds`: the cost the gate plans with follows it."""
        if 1 <= width <= len(self.costs) and seconds > 0:
            self.costs[width - 1] += COST_EWMA * (seconds - self.costs[width - 1])


def best_proposal(gate: Gate, proposals: Sequence) -> tuple[Optional[object], Decision]:
    """The proposal (and how much of it) with the best predicted rate; (None, plain) when none pays."""
    chosen, decision = None, gate.decide(None, 0)
    for proposal in proposals:
        if proposal is None:
            continue
        d = gate.decide(proposal.kind, len(proposal.tokens))
        if d.guesses and d.predicted_rate > decision.predicted_rate:
            chosen, decision = proposal, d
    return chosen, decision
