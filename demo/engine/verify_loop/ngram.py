"""Guesses from the prompt and the answer so far: the most recent earlier occurrence of the
sequence's last n tokens (n from `max_n` down to `min_n`) proposes what followed it there.

The same idea as OpenVINO GenAI's prompt lookup, llama.cpp's draftless n-gram modes and vLLM's
n-gram proposer; kept incrementally (a dict per n from an n-gram to where it last ended), so a
proposal costs a few dict lookups however long the answer grows. A code edit or a rename copies
whole lines of the prompt, which is where this drafter shines."""

from __future__ import annotations

from typing import Optional, Sequence

from .interfaces import PROMPT, Proposal


class NgramProposer:
    source = PROMPT

    def __init__(self, max_n: int = 4, min_n: int = 1):
        if not 1 <= min_n <= max_n:
            raise ValueError("n-gram sizes need 1 <= min_n <= max_n")
        self.max_n, self.min_n = max_n, min_n
        self.seq: list[int] = []
        # For each n: n-gram -> the index just after its most recent occurrence that ends before
        # the sequence's last token (so the sequence's own suffix never matches itself).
        self.last_end: dict[int, dict[tuple, int]] = {}
        self.indexed = 0  # n-grams ending at indices < self.indexed are in last_end

    def start(self, prompt_ids: Sequence[int]) -> None:
        self.seq = []
        self.last_end = {n: {} for n in range(self.min_n, self.max_n + 1)}
        self.indexed = 0
        self.extend(prompt_ids)

    def extend(self, new_ids: Sequence[int]) -> None:
        self.seq.extend(int(t) for t in new_ids)
        # Index every n-gram that ends before the last token: its continuation is known.
        for end in range(max(self.indexed, 1), len(self.seq)):
            for n in self.last_end:
                if end >= n:
                    self.last_end[n][tuple(self.seq[end - n:end])] = end
        self.indexed = max(self.indexed, len(self.seq))

    def propose(self, k: int) -> Optional[Proposal]:
        seq = self.seq
        for n in range(self.max_n, self.min_n - 1, -1):
            if len(seq) <= n:
                continue
            end = self.last_end[n].get(tuple(seq[-n:]))
            if end is None:
                continue
            chain = tuple(seq[end:end + k])
            if chain:
                # Two kinds, so the gate learns fast: a match of 3+ tokens holds far more often
                # (a copied line) than one of 1-2 (a common token that happened to recur).
                return Proposal(chain, PROMPT, f"{PROMPT}:{'long' if n >= 3 else 'short'}")
        return None

    def observe(self, inputs, predictions) -> None:
        pass
