"""Guesses from the main model's own earlier predictions (token recycling, Luo et al. 2024).

Every verify step computes the main model's next token after each token it was fed, the
rejected guesses included. Kept per pair of tokens (and per token as a fallback), those
predictions chain into a guess of what follows the sequence now: free, and right wherever
the answer repeats a turn of phrase. Kept for one answer only, so a benchmark never drafts
from an earlier answer to the same prompt."""

from __future__ import annotations

from typing import Optional, Sequence

from .interfaces import RECYCLED, Proposal


class RecycledProposer:
    source = RECYCLED

    def __init__(self):
        self.after_pair: dict[tuple[int, int], int] = {}
        self.after_token: dict[int, int] = {}
        self.tail: list[int] = []  # the sequence's last two tokens

    def start(self, prompt_ids: Sequence[int]) -> None:
        self.after_pair.clear()
        self.after_token.clear()
        self.tail = [int(t) for t in prompt_ids[-2:]]

    def extend(self, new_ids: Sequence[int]) -> None:
        self.tail = (self.tail + [int(t) for t in new_ids])[-2:]

    def observe(self, inputs: Sequence[int], predictions: Sequence[int], before: Optional[int] = None) -> None:
        """`predictions[i]` followed `inputs[:i+1]`; `before` is the token fed just before inputs[0]."""
        prev = before
        for token, nxt in zip(inputs, predictions):
            token, nxt = int(token), int(nxt)
            self.after_token[token] = nxt
            if prev is not None:
                self.after_pair[(prev, token)] = nxt
            prev = token

    def _next(self, a: Optional[int], b: int) -> tuple[Optional[int], bool]:
        if a is not None and (a, b) in self.after_pair:
            return self.after_pair[(a, b)], True
        return self.after_token.get(b), False

    def propose(self, k: int) -> Optional[Proposal]:
        if not self.tail:
            return None
        a = self.tail[-2] if len(self.tail) > 1 else None
        b = self.tail[-1]
        chain, first_by_pair = [], None
        while len(chain) < k:
            nxt, by_pair = self._next(a, b)
            if nxt is None:
                break
            if first_by_pair is None:
                first_by_pair = by_pair
            chain.append(nxt)
            a, b = b, nxt
        if not chain:
            return None
        return Proposal(tuple(chain), RECYCLED, f"{RECYCLED}:{'pair' if first_by_pair else 'token'}")
