"""The replay: what free drafting predicts for a known greedy answer, before any model runs it.

The own verify loop runs for real (its proposers, its gate) over a stand-in for the main model
that answers every verify with the known answer's tokens, so each step's guesses are kept
exactly where the real main model would keep them (greedy). With the machine's measured
verify costs (scripts/verify_cost.py) and the loop's own cost a step, the steps give a
predicted decode time, against plain decoding's len(answer) × cost(1).

This is the prediction printed beside every measured rate (scripts/free_draft_headline.py),
and the whole of scripts/replay_drafters.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..engine.verify_loop.gate import Gate
from ..engine.verify_loop.loop import Sampler, VerifyLoop


class ReplayMain:
    """A main model that always says the known answer: row i of a verify is one-hot on the
    answer token at that row's position (past the answer's end: the end token)."""

    def __init__(self, prompt_len: int, answer: Sequence[int], eos: int):
        self.prompt_len, self.answer, self.eos = prompt_len, [int(t) for t in answer], int(eos)
        self.vocab = max([*self.answer, self.eos]) + 1
        self.past = self.fed = 0

    def _row(self, position: int) -> np.ndarray:
        i = position - self.prompt_len
        row = np.zeros(self.vocab, dtype=np.float32)
        row[self.answer[i] if 0 <= i < len(self.answer) else self.eos] = 1.0
        return row

    def prefill(self, ids) -> np.ndarray:
        self.past, self.fed = len(ids), len(ids)
        return self._row(self.past)

    def verify(self, ids) -> np.ndarray:
        rows = np.stack([self._row(self.past + 1 + i) for i in range(len(ids))])
        self.past += len(ids)
        self.fed = len(ids)
        return rows

    def keep(self, n: int) -> None:
        self.past -= self.fed - n
        self.fed = n


@dataclass(frozen=True)
class Prediction:
    tokens: int                 # answer tokens replayed after the first
    steps: int                  # main-model steps the loop took for them
    drafting_steps: int         # of which verified at least one guess
    tokens_from_drafting: int   # tokens those steps produced
    predicted_s: float          # the loop's decode time, predicted
    plain_s: float              # plain decoding's, predicted the same way
    sources: dict               # drafting steps by the drafter that proposed

    @property
    def ratio(self) -> float:
        return self.plain_s / self.predicted_s if self.predicted_s else 1.0

    @property
    def share_drafted(self) -> float:
        return self.tokens_from_drafting / self.tokens if self.tokens else 0.0

    @property
    def tokens_per_drafting_step(self) -> float:
        return self.tokens_from_drafting / self.drafting_steps if self.drafting_steps else 0.0

    def as_dict(self) -> dict:
        return {"tokens": self.tokens, "steps": self.steps, "drafting_steps": self.drafting_steps,
                "share_drafted": self.share_drafted, "tokens_per_drafting_step": self.tokens_per_drafting_step,
                "predicted_ratio": self.ratio, "sources": self.sources}


def loop_seconds_per_step(result, steps: Sequence) -> float:
    """The loop's own work a step in a real run (RunResult and its steps after the prefill's):
    the wall time from the first step's infer to the run's end, less the infers."""
    if not steps:
        return 0.0
    wall = result.end - (steps[0].t - steps[0].infer_s)
    return max(0.0, (wall - sum(s.infer_s for s in steps)) / len(steps))


def predict(prompt_ids: Sequence[int], answer: Sequence[int], proposers, gate: Gate,
            loop_s: float, plain_loop_s: float, eos: int) -> Prediction:
    """Replay `answer` (the main model's greedy tokens after `prompt_ids`, its first token
    included) through the loop with a copy of `gate` (its costs: one steady verify of m tokens,
    and a change of m); `loop_s`: the loop's own cost a step; `plain_loop_s`: a plain
    pipeline's own cost a token."""
    gate = gate.carried(1.0)
    costs, switch = list(gate.costs), gate.switch_s
    main = ReplayMain(len(prompt_ids), answer, eos)
    loop = VerifyLoop(main, proposers, gate, [eos], follow_costs=False)
    steps = loop.generate(prompt_ids, len(answer), Sampler(), lambda step: True)[1:]
    widths = [1] + [s.width for s in steps]
    drafting = [s for s in steps if s.source is not None]
    sources: dict = {}
    for s in drafting:
        sources[s.source] = sources.get(s.source, 0) + 1
    tokens = sum(len(s.tokens) for s in steps)
    return Prediction(
        tokens=tokens, steps=len(steps), drafting_steps=len(drafting),
        tokens_from_drafting=sum(len(s.tokens) for s in drafting),
        predicted_s=sum(costs[w - 1] + (switch if w != before else 0.0) + loop_s
                        for before, w in zip(widths, widths[1:])),
        plain_s=tokens * (costs[0] + plain_loop_s), sources=sources)
