"""What each number of a race means: one definition each, written here once and used by the
summary, "Why this speedup?" (explain.py), the acceptance curve (acceptance.py), the bench,
the CLI and the page's labels (DEFINITIONS). Pure functions over chunks.

Like vLLM's spec-decode metrics, the conventions are fixed in one place:

  step             one main-model call that produced tokens; our streamer sees one chunk per
                   step. The first is the *prompt's step* (prefill): it yields the main model's
                   first token and checks no guess. Every later step is a *verify step*.
  tokens per step  (τ, "acceptance length") tokens of the verify steps ÷ verify steps. It
                   includes the main model's own token of each step (the correction, or the
                   bonus token when every guess was kept): 1.0 without speculation, at most K+1.
                   The prompt's step is left out.
  accepted tokens  guesses (draft model or prompt lookup) the main model kept: Σ(step size − 1)
                   over the verify steps, counted from the stream, the last step included.
  acceptance rate  OpenVINO's accepted ÷ drafted guesses. OpenVINO counts neither in the step
                   that ends the answer, so both terms leave that step out (the accepted count
                   above keeps it: the two accepted counts differ by that step at most). None
                   where OpenVINO reports no counts (prompt lookup) or nothing was drafted.
  TTFT             from the moment this process called generate() (the chat template already
                   applied, the prompt counted) until the first chunk reached our streamer:
                   OpenVINO's tokenization, the prefill and the hop from OpenVINO's streamer
                   thread included (time.perf_counter, both ends in this process).
  tok/s            generated tokens ÷ (end − start), end when generate() returned: tokenization,
                   prefill, detokenization and OpenVINO's work after the last token included;
                   the rate a visitor waits through.

OpenVINO's own perf_metrics (TTFT, TPOT) and per-step timers are kept beside ours in RunResult.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from .streaming import Chunk, RunResult


# The page's words for each number (stats labels, the summary): what a visitor reads.
DEFINITIONS = {
    "tok/s": "generated tokens ÷ seconds from generate() called to generate() returned "
             "(tokenization, prefill and detokenization included)",
    "TTFT": "time to first token: from generate() called to the first token reaching the page's streamer "
            "(tokenization, prefill and the streamer-thread hop included)",
    "tokens per step": "tokens each verify step produced, the main model's own token included "
                       "(the prompt's step left out)",
    "accepted": "guesses the main model kept, counted from the stream over every verify step",
    "acceptance rate": "OpenVINO's accepted ÷ drafted guesses (OpenVINO counts neither in the last step)",
}


@dataclass(frozen=True)
class SideStats:
    """One side's numbers, as defined in this module's docstring."""

    tokens: int
    elapsed_s: float
    tokens_per_s: float
    ttft_s: Optional[float]
    tpot_ms: Optional[float]       # mean time per output token after the first
    steps: int                     # verify steps: chunks after the prompt's
    tokens_per_step: float         # τ over the verify steps (0.0 before the first verify step)
    accepted: int                  # guesses kept in the verify steps, counted from the chunks

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def verify_step_sizes(chunks: Sequence[Chunk]) -> list[int]:
    """Tokens of each verify step: every chunk but the prompt's (the first)."""
    return [len(c.token_ids) for c in chunks[1:]]


def tokens_per_step(step_sizes: Sequence[int]) -> Optional[float]:
    """τ of verify steps (their sizes, the prompt's step already left out); None without one."""
    return sum(step_sizes) / len(step_sizes) if step_sizes else None


def side_stats(chunks: Sequence[Chunk], start: float, now: Optional[float] = None) -> SideStats:
    """Stats of one side so far (live) or at the end (`now` = the run's end time)."""
    tokens = sum(len(c.token_ids) for c in chunks)
    end = now if now is not None else (chunks[-1].t if chunks else start)
    elapsed = max(end - start, 1e-9)
    ttft = chunks[0].t - start if chunks else None
    after_first = tokens - (len(chunks[0].token_ids) if chunks else 0)
    tpot = (chunks[-1].t - chunks[0].t) / after_first * 1000 if after_first > 0 else None
    sizes = verify_step_sizes(chunks)
    return SideStats(
        tokens=tokens,
        elapsed_s=elapsed,
        tokens_per_s=tokens / elapsed if tokens else 0.0,
        ttft_s=ttft,
        tpot_ms=tpot,
        steps=len(sizes),
        tokens_per_step=tokens_per_step(sizes) or 0.0,
        accepted=sum(c.accepted for c in chunks[1:]),
    )


def speedup(baseline: SideStats, speculative: SideStats) -> Optional[float]:
    if baseline.tokens_per_s <= 0 or speculative.tokens_per_s <= 0:
        return None
    return speculative.tokens_per_s / baseline.tokens_per_s


def acceptance_rate(accepted: Optional[int], drafted: Optional[int]) -> Optional[float]:
    """Accepted ÷ drafted guesses, both OpenVINO's counts (neither has the last step), or None
    if nothing was drafted."""
    if accepted is None or not drafted:
        return None
    return accepted / drafted


def equality_verdict(baseline_ids: Sequence[int], speculative_ids: Sequence[int]) -> str:
    """'identical', or where the two token sequences first differ (1-based)."""
    for i, (a, b) in enumerate(zip(baseline_ids, speculative_ids)):
        if a != b:
            return f"diverged at token {i + 1}"
    if len(baseline_ids) != len(speculative_ids):
        shorter = min(len(baseline_ids), len(speculative_ids))
        return f"diverged at token {shorter + 1} (one side stopped earlier)"
    return "identical"


@dataclass(frozen=True)
class Comparison:
    """One race's numbers, computed once by `compare` and read by the page, the CLI, the
    scoreboard, recordings, the three-way race and the bench.

    `speedup` is speculative tok/s ÷ baseline tok/s (wall clock, prefill included), None when
    either side failed or made no token; `acceptance_rate` is OpenVINO's `ov_accepted` ÷
    `ov_drafted` guesses (this module's definitions); `verdict` is "identical" or where the two
    token sequences first differ."""

    baseline: SideStats
    speculative: SideStats
    speedup: Optional[float]
    acceptance_rate: Optional[float]
    verdict: str
    failed: bool  # either side ended with an error
    ov_accepted: Optional[int] = None  # OpenVINO's counts behind acceptance_rate
    ov_drafted: Optional[int] = None


def compare(baseline: RunResult, speculative: RunResult) -> Comparison:
    b = side_stats(baseline.chunks, baseline.start, baseline.end)
    s = side_stats(speculative.chunks, speculative.start, speculative.end)
    failed = bool(baseline.error or speculative.error)
    accepted, drafted = speculative.ov_accepted_tokens, speculative.ov_draft_tokens
    return Comparison(baseline=b, speculative=s, speedup=None if failed else speedup(b, s),
                      acceptance_rate=acceptance_rate(accepted, drafted),
                      verdict=equality_verdict(baseline.token_ids, speculative.token_ids), failed=failed,
                      ov_accepted=accepted, ov_drafted=drafted)
