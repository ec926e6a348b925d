"""Chunks: what one main-model step adds to the output, with its timestamp.

On OpenVINO GenAI's continuous-batching backend (used for speculative decoding) every
step's new tokens reach the streamer together: one verify step of the main model shows up
as (accepted draft tokens + 1) tokens. We keep that grouping, because it is exactly what
speculative decoding buys, and the page shows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

BASELINE = "baseline"
SPECULATIVE = "speculative"
SIDES = (BASELINE, SPECULATIVE)


@dataclass(frozen=True)
class Chunk:
    side: str
    token_ids: tuple[int, ...]
    text: str           # text this chunk added (may be "" while a multi-byte char is incomplete)
    accepted_text: str  # the leading part of `text` that came from accepted draft tokens
    t: float            # time.perf_counter() when the chunk arrived

    @property
    def accepted(self) -> int:
        """Draft (or prompt-lookup) tokens the main model accepted in this step.

        A step yields its accepted guesses plus one token of the main model's own (the
        correction, or the bonus token when every guess was accepted).
        """
        return len(self.token_ids) - 1 if self.side == SPECULATIVE else 0


class IncrementalDetokenizer:
    """Turn a growing list of token ids into text deltas that never split a character.

    Byte-level BPE tokens can end in the middle of a UTF-8 character; decoding such a
    prefix yields U+FFFD (Hugging Face) or silently drops the incomplete bytes (OpenVINO's
    detokenizer: decode([🌱's first byte]) == ""), so we hold text back until the decoded
    window grows by a character that is not U+FFFD. Decoding
    only a short window (vLLM's prefix/read offsets) keeps the cost per step flat and keeps
    SentencePiece's leading spaces right, which decoding tokens one by one would drop.
    """

    def __init__(self, decode: Callable[[Sequence[int]], str]):
        self._decode = decode
        self._ids: list[int] = []
        self._prefix = 0  # window start: already-emitted tokens kept for context
        self._read = 0    # first token whose text has not been emitted yet

    def feed(self, ids: Sequence[int]) -> tuple[str, str]:
        """Add one step's tokens; return (delta of all but the last token, delta of the last)."""
        head = self._push(ids[:-1]) if len(ids) > 1 else ""
        return head, self._push(ids[-1:])

    def _push(self, ids: Sequence[int]) -> str:
        self._ids.extend(ids)
        return self._emit(final=False)

    def _emit(self, final: bool) -> str:
        before = self._decode(self._ids[self._prefix:self._read])
        text = self._decode(self._ids[self._prefix:])
        if not final and (text.endswith("\ufffd") or len(text) <= len(before)):
            return ""  # incomplete character (or nothing new yet): wait for the next token
        delta = text[len(before):]
        self._prefix, self._read = self._read, len(self._ids)
        return delta

    def flush(self) -> str:
        return self._emit(final=True) if self._read < len(self._ids) else ""
