"""Numbers for each side and for the comparison. Pure functions over chunks.

Our own figures are wall-clock, measured from the moment generate() was called until each
chunk reached the streamer (time.perf_counter), so they are what a visitor sees:
  tok/s = generated tokens / elapsed seconds (prefill included).
OpenVINO's own perf_metrics (TTFT, TPOT) and extended_perf_metrics (accepted and drafted
tokens) are reported next to them where it provides them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from .streaming import Chunk, RunResult


@dataclass(frozen=True)
class SideStats:
    tokens: int
    elapsed_s: float
    tokens_per_s: float
    ttft_s: Optional[float]
    tpot_ms: Optional[float]       # mean time per output token after the first
    steps: int                     # main-model steps (= chunks)
    tokens_per_step: float
    accepted: int                  # draft tokens accepted, counted from the chunks

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def side_stats(chunks: Sequence[Chunk], start: float, now: Optional[float] = None) -> SideStats:
    """Stats of one side so far (live) or at the end (`now` = the run's end time)."""
    tokens = sum(len(c.token_ids) for c in chunks)
    end = now if now is not None else (chunks[-1].t if chunks else start)
    elapsed = max(end - start, 1e-9)
    ttft = chunks[0].t - start if chunks else None
    after_first = tokens - (len(chunks[0].token_ids) if chunks else 0)
    tpot = (chunks[-1].t - chunks[0].t) / after_first * 1000 if after_first > 0 else None
    steps = len(chunks)
    return SideStats(
        tokens=tokens,
        elapsed_s=elapsed,
        tokens_per_s=tokens / elapsed if tokens else 0.0,
        ttft_s=ttft,
        tpot_ms=tpot,
        steps=steps,
        tokens_per_step=tokens / steps if steps else 0.0,
        accepted=sum(c.accepted for c in chunks),
    )


def speedup(baseline: SideStats, speculative: SideStats) -> Optional[float]:
    if baseline.tokens_per_s <= 0 or speculative.tokens_per_s <= 0:
        return None
    return speculative.tokens_per_s / baseline.tokens_per_s


def acceptance_rate(accepted: Optional[int], drafted: Optional[int]) -> Optional[float]:
    """Accepted ÷ drafted guesses (OpenVINO's counts), or None if nothing was drafted."""
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
    either side failed or made no token; `acceptance_rate` is OpenVINO's accepted ÷ drafted
    guesses; `verdict` is "identical" or where the two token sequences first differ."""

    baseline: SideStats
    speculative: SideStats
    speedup: Optional[float]
    acceptance_rate: Optional[float]
    verdict: str
    failed: bool  # either side ended with an error


def compare(baseline: RunResult, speculative: RunResult) -> Comparison:
    b = side_stats(baseline.chunks, baseline.start, baseline.end)
    s = side_stats(speculative.chunks, speculative.start, speculative.end)
    failed = bool(baseline.error or speculative.error)
    return Comparison(baseline=b, speculative=s, speedup=None if failed else speedup(b, s),
                      acceptance_rate=acceptance_rate(speculative.ov_accepted_tokens, speculative.ov_draft_tokens),
                      verdict=equality_verdict(baseline.token_ids, speculative.token_ids), failed=failed)
