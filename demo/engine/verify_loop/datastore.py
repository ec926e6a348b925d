"""Guesses from a datastore of Python sources (models/code_datastore.py), as REST drafts:
find where the sequence's last 3 tokens occur in the datastore, keep the occurrences that
also match the most tokens before them (up to 8), and follow the continuation most of them
share, token by token (a greedy path through their trie).

The kind of a guess says whether several occurrences agree on its first token, one occurrence
stands alone, or they disagree, so the gate learns how often each holds."""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from ...models.code_datastore import WINDOW, Datastore
from .interfaces import DATASTORE, Proposal

MAX_OCCURRENCES = 256  # read at most this many occurrences of a window (evenly spread)
LONGEST_MATCH = 8


class DatastoreProposer:
    source = DATASTORE

    def __init__(self, store: Datastore):
        self.store = store
        self.tail: list[int] = []

    def start(self, prompt_ids: Sequence[int]) -> None:
        self.tail = [int(t) for t in prompt_ids[-LONGEST_MATCH:]]

    def extend(self, new_ids: Sequence[int]) -> None:
        self.tail = (self.tail + [int(t) for t in new_ids])[-LONGEST_MATCH:]

    def observe(self, inputs, predictions) -> None:
        pass

    def propose(self, k: int) -> Optional[Proposal]:
        if len(self.tail) < WINDOW or k <= 0:
            return None
        found = self.store.positions(self.tail[-WINDOW:])
        if found.size == 0:
            return None
        if found.size > MAX_OCCURRENCES:
            found = found[np.linspace(0, found.size - 1, MAX_OCCURRENCES).astype(np.int64)]
        found = self._longest(found)
        starts = found + WINDOW  # where each occurrence's continuation begins
        tokens = self.store.tokens
        chain: list[int] = []
        agreement, support = 1.0, found.size
        for i in range(k):
            at = starts + i
            at = at[at < tokens.shape[0]]
            if at.size == 0:
                break
            values, counts = np.unique(np.asarray(tokens[at]), return_counts=True)
            best = int(np.argmax(counts))
            if i == 0:
                agreement = counts[best] / at.size
            chain.append(int(values[best]))
            starts = starts[:at.size][np.asarray(tokens[at]) == values[best]]
            if starts.size == 0:
                break
        if not chain:
            return None
        # Measured on a Zen 4 (2026-12-06): guesses most occurrences agree on held about 9 times
        # in 10, a lone occurrence's rarely, whatever the match length: three kinds for the gate.
        level = "single" if support == 1 else "agreed" if agreement >= 0.5 else "split"
        return Proposal(tuple(chain), DATASTORE, f"{DATASTORE}:{level}")

    def _longest(self, found: np.ndarray) -> np.ndarray:
        """The occurrences that match the most tokens before the window too."""
        tokens = self.store.tokens
        for back in range(1, len(self.tail) - WINDOW + 1):
            at = found - back
            ok = at >= 0
            want = self.tail[-WINDOW - back]
            hit = found[ok][np.asarray(tokens[at[ok]]) == want]
            if hit.size == 0:
                break
            found = hit
        return found
