"""Chunks: what one main-model step adds to the output, with its timestamp; and what a run
streams to every layer above the engine: RunResult (one side's run) and the events.

On OpenVINO GenAI's continuous-batching backend (used for speculative decoding) every
step's new tokens reach the streamer together: one verify step of the main model shows up
as (accepted draft tokens + 1) tokens. We keep that grouping, because it is exactly what
speculative decoding buys, and the page shows it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, Union

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


@dataclass
class RunResult:
    """One side's finished (or stopped, or failed) run."""

    side: str
    start: float
    end: float
    chunks: list[Chunk] = field(default_factory=list)
    cancelled: bool = False
    error: Optional[str] = None
    # When the side's engine saw its stop flag (perf_counter, one clock for every process on
    # the machine): a child side's, when the cancel arrived over its pipe; None where the run
    # reads the caller's flag itself (in-process runners) or was never stopped.
    stop_seen_at: Optional[float] = None
    # Figures OpenVINO itself reports (perf_metrics / extended_perf_metrics); None when absent.
    ov_generated_tokens: Optional[int] = None
    ov_ttft_ms: Optional[float] = None
    ov_tpot_ms: Optional[float] = None
    ov_accepted_tokens: Optional[int] = None
    ov_draft_tokens: Optional[int] = None
    # Where the time went, from OpenVINO's own timers (ms): the main model's forward passes
    # (for the speculative side: verifying), the draft's (drafting), and the main model's
    # calls (prefill included), which with the tokens gives the cost of one verify step.
    ov_main_infer_ms: Optional[float] = None
    ov_draft_infer_ms: Optional[float] = None
    ov_main_calls: Optional[int] = None
    # OpenVINO's per-step timers (ms), one entry per step that produced tokens, the prompt's
    # step first (a long prompt's earlier prefill chunks produce none and have no entry):
    # the main model's step (ContinuousBatchingImpl::step on both sides: scheduling, forward,
    # sampling), and the whole step (for the speculative side: drafting + verifying).
    ov_step_tokens: Optional[list[int]] = None
    ov_main_step_ms: Optional[list[float]] = None
    ov_step_ms: Optional[list[float]] = None
    # The own verify loop's guesses by drafter (demo.engine.verify_loop): source -> [steps that
    # verified its guesses, guesses verified, guesses kept]; None for OpenVINO GenAI's pipelines.
    guess_sources: Optional[dict] = None
    # The own verify loop's steps, one per chunk: [the guesses the main model verified, the drafter
    # that proposed them (None: a plain step), how many of them only pad the step]: the step view
    # shows them as they ran, nothing reconstructed.
    guess_steps: Optional[list] = None
    # Where this side ran when it is not this process (demo.serve: "host (node 1a2b3c4d), 1 thread").
    ran_on: Optional[str] = None
    # How a replica that batches requests ran this one (demo.engine.batched_runner.served_note).
    served: Optional[str] = None

    @property
    def token_ids(self) -> list[int]:
        return [t for c in self.chunks for t in c.token_ids]

    @property
    def text(self) -> str:
        return "".join(c.text for c in self.chunks)


@dataclass(frozen=True)
class StartEvent:
    """A side called generate() at time `t` (perf_counter): its clock starts here."""

    side: str
    t: float


@dataclass(frozen=True)
class ChunkEvent:
    side: str
    chunk: Chunk
    phase: str = "live"  # "live" while generating, "replay" when replaying a fair run


@dataclass(frozen=True)
class DoneEvent:
    side: str
    result: object  # RunResult (or a test double with the same fields)


Event = Union[StartEvent, ChunkEvent, DoneEvent]


@dataclass(frozen=True)
class Heartbeat:
    """Nothing happened for HEARTBEAT_S: yielded by a stream asked for heartbeats (a race, a
    replay, a job waiting in line or loading), so that its consumer gets a yield. A web server
    closes a streaming handler only between two yields: without these a Stop (or a closed tab)
    could not reach a prefill, a side that loads or a job in line until its next real event.
    A consumer skips it (or repeats what it showed); it carries nothing."""


HEARTBEAT = Heartbeat()
# A cancel reaches a waiting stream within one heartbeat (plus the admission's own poll to
# leave the line), so Stop takes effect within half a second. Each heartbeat is one small update.
HEARTBEAT_S = 0.2


@dataclass(frozen=True)
class StatusEvent:
    """Something slow is happening before tokens flow (preparing, loading, warming up)."""

    message: str


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
