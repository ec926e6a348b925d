"""What every drafter of the own verify loop implements (vLLM's proposer interface, smaller).

A proposer sees the whole token sequence so far (prompt and answer) and proposes a chain of
tokens to follow it, with how sure it is of each. It never calls a model: a guess must cost
next to nothing, or the loop's point (more tokens per read of the main model's weights) is lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

# Where a guess came from, as the step view and the summary name it.
PROMPT = "prompt"        # an n-gram of the prompt or the answer so far
DATASTORE = "datastore"  # an n-gram of the datastore of Python sources
RECYCLED = "recycled"    # the main model's own earlier prediction after the same token


@dataclass(frozen=True)
class Proposal:
    """A chain of guessed tokens and what it rests on.

    `kind` names the evidence (e.g. "prompt:3" for a 3-token match) so the gate can learn,
    per kind, how often such guesses are accepted on this answer."""

    tokens: tuple[int, ...]
    source: str
    kind: str = ""

    def __post_init__(self):
        if not self.kind:
            object.__setattr__(self, "kind", self.source)


class Proposer(Protocol):
    source: str

    def start(self, prompt_ids: Sequence[int]) -> None:
        """Begin a new answer to `prompt_ids` (forget the last answer's own tokens)."""

    def extend(self, new_ids: Sequence[int]) -> None:
        """Tokens the main model kept, appended to the sequence in order."""

    def propose(self, k: int) -> Proposal | None:
        """Up to `k` tokens to follow the sequence so far, or None when there is nothing to go on."""

    def observe(self, inputs: Sequence[int], predictions: Sequence[int]) -> None:
        """The main model's greedy next token after each token it was just fed (most ignore it)."""
