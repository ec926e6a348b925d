"""The own verify loop: prefill the prompt, then one infer per step over `[last] + guesses`,
keep the longest prefix the main model agrees with plus its own next token, drop the rest.

Greedy: a guess is kept when it is the main model's argmax, so the tokens are exactly plain
greedy decoding's (up to the kernels' arithmetic: exact mode makes them identical). Sampling:
the standard rule for a draft that puts all its probability on its guess (Leviathan et al.):
keep guess x with probability p(x); on a rejection sample from p with x removed; after a run
of accepted guesses sample the bonus token from p. The output is distributed as sampling from
the main model alone."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

from .gate import Gate, best_proposal
from .interfaces import Proposer


@dataclass(frozen=True)
class Step:
    """One main-model step of the loop: what it kept and where the guesses came from."""

    tokens: tuple[int, ...]    # the accepted guesses, then the main model's own token
    proposed: tuple[int, ...]  # the guesses it verified: the proposal's, then any padding
    source: Optional[str]      # which drafter proposed them (None: a plain or padded step)
    kind: Optional[str]
    infer_s: float             # the main model's infer for this step
    t: float                   # perf_counter when the step's tokens were known
    padded: int = 0            # guesses that only pad the step to the width the gate holds

    @property
    def accepted(self) -> int:
        return len(self.tokens) - 1

    @property
    def width(self) -> int:
        return 1 + len(self.proposed)


@dataclass
class Sampler:
    """Greedy (temperature None) or sampling with temperature and top-p from one seeded generator."""

    temperature: Optional[float] = None
    top_p: float = 1.0
    seed: int = 42

    def __post_init__(self):
        self.rng = np.random.default_rng(self.seed)

    @property
    def greedy(self) -> bool:
        return self.temperature is None

    def probs(self, logits: np.ndarray) -> np.ndarray:
        z = logits.astype(np.float64) / self.temperature
        z -= z.max()
        p = np.exp(z)
        p /= p.sum()
        if self.top_p < 1.0:
            order = np.argsort(-p)
            keep = np.cumsum(p[order]) - p[order] < self.top_p  # the smallest set reaching top_p
            mask = np.zeros_like(p, dtype=bool)
            mask[order[keep]] = True
            p = np.where(mask, p, 0.0)
            p /= p.sum()
        return p

    def draw(self, p: np.ndarray) -> int:
        return int(self.rng.choice(p.shape[0], p=p))


def accept(rows: np.ndarray, guesses: Sequence[int], sampler: Sampler) -> tuple[int, ...]:
    """The tokens a verify step keeps: rows[i] are the main model's logits after the step's
    input i (the last token, then each guess). Returns the accepted guesses and one token of
    the main model's own."""
    kept: list[int] = []
    for i, guess in enumerate(guesses):
        if sampler.greedy:
            own = int(np.argmax(rows[i]))
            if own != guess:
                return (*kept, own)
        else:
            p = sampler.probs(rows[i])
            if sampler.rng.random() >= p[guess]:  # rejected: resample from p without the guess
                p[guess] = 0.0
                if p.sum() <= 0:  # p was all on the guess (cannot be rejected then); defensive
                    return (*kept, guess)
                return (*kept, sampler.draw(p / p.sum()))
        kept.append(int(guess))
    last = rows[len(guesses)]
    own = int(np.argmax(last)) if sampler.greedy else sampler.draw(sampler.probs(last))
    return (*kept, own)


class VerifyLoop:
    """Drives one stateful main (main_model.StatefulMain) with free drafters behind a gate."""

    def __init__(self, main, proposers: Sequence[Proposer], gate: Gate, eos_ids: Sequence[int],
                 follow_costs: bool = True):
        self.main = main
        self.follow_costs = follow_costs  # False when `main` is not a real model (a replay)
        self.proposers = list(proposers)
        self.gate = gate
        self.eos = set(int(e) for e in eos_ids)

    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int, sampler: Sampler,
                 on_step: Callable[[Step], bool]) -> list[Step]:
        """Generate up to max_new_tokens after prompt_ids, calling on_step after each step
        (return False to stop). The first step is the prefill's token."""
        prompt_ids = [int(t) for t in prompt_ids]
        for p in self.proposers:
            p.start(prompt_ids)
        steps: list[Step] = []
        t0 = time.perf_counter()
        row = self.main.prefill(prompt_ids)
        first = accept(row[None, :], (), sampler)
        steps.append(Step(first, (), None, None, time.perf_counter() - t0, time.perf_counter()))
        self._kept(first)
        produced = 1
        if not on_step(steps[-1]) or first[-1] in self.eos:
            return steps
        last = first[-1]
        while produced < max_new_tokens:
            step = self._step(last, max_new_tokens - produced - 1, sampler)
            steps.append(step)
            self._kept(step.tokens)
            produced += len(step.tokens)
            if not on_step(step) or step.tokens[-1] in self.eos:
                break
            last = step.tokens[-1]
        return steps

    def _step(self, last: int, room: int, sampler: Sampler) -> Step:
        """One verify: the gate's width, filled with the best proposal's guesses and padded with
        the last token (a guess that rarely holds, but keeps the width: changing it costs more)."""
        gate = self.gate
        if room > 0:
            proposals = [p.propose(min(room, gate.max_guesses)) for p in self.proposers]
            proposal, decision = best_proposal(gate, proposals)
        else:  # the answer's last token: a guess could not be kept
            proposal, decision = None, gate.decide(None, 0)
        width = min(decision.width, room + 1)
        guesses = proposal.tokens[:min(decision.guesses, width - 1)] if proposal is not None else ()
        padded = width - 1 - len(guesses)
        fed = (last, *guesses, *([last] * padded))
        t0 = time.perf_counter()
        rows = self.main.verify(fed)
        kept = accept(rows, fed[1:], sampler)
        self.main.keep(len(kept))  # the step's input rows whose guesses held: last + accepted
        infer_s = time.perf_counter() - t0
        if self.follow_costs:
            gate.timed(width, infer_s)
            gate.outcome(width, len(kept), infer_s)
        gate.width = width
        if proposal is not None and guesses:
            gate.learn(proposal.kind, len(guesses), min(len(kept) - 1, len(guesses)))
        self._observe(fed, rows)
        kept = self._until_eos(kept)
        return Step(kept, fed[1:], proposal.source if guesses else None, proposal.kind if guesses else None,
                    infer_s, time.perf_counter(), padded)

    def _kept(self, tokens: Sequence[int]) -> None:
        for p in self.proposers:
            p.extend(tokens)

    def _observe(self, inputs: Sequence[int], rows: np.ndarray) -> None:
        predictions = rows.argmax(axis=-1)
        for p in self.proposers:
            p.observe(inputs, predictions)

    def _until_eos(self, kept: tuple[int, ...]) -> tuple[int, ...]:
        for i, t in enumerate(kept):
            if t in self.eos:
                return kept[:i + 1]
        return kept
