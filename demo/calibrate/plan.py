"""How much a calibration measures (demo.calibrate.calibration): the full plan of
`python -m demo.calibrate`, and the launch plan `python app.py` runs before it says Ready."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .measure import DRAFT_REPEATS, REPEATS


@dataclass(frozen=True)
class Plan:
    """How much a calibration measures. The launch plan is what `python app.py` runs on a
    fresh machine before it says Ready: acceptance from the first main format's answers
    only (formats of one model agree with the draft within a few %), sparse curves
    everywhere, fewer rounds, and a real pipeline timed on one prompt, over its first
    `overhead_new_tokens` tokens (enough steps at every K; fewer in race mode, whose steps
    are slower) and only at the two K its overhead line goes through (K=1 then follows the
    line)."""

    name: str
    sparse_fair: bool = False
    repeats: int = REPEATS
    acceptance_per_main: bool = True
    draft_repeats: int = DRAFT_REPEATS
    overhead_prompts: Optional[int] = None   # None: all the calibration prompts
    overhead_new_tokens: Optional[int] = None  # None: as many as the acceptance answers
    race_overhead_new_tokens: Optional[int] = None  # None: overhead_new_tokens (race steps are slower)
    overhead_at_k1: bool = True  # also time K=1 itself, which can sit off the line
    # The main model alone, every format's real baseline pipeline interleaved (plain.plain_rates).
    plain_rounds: int = 3
    plain_prompts: Optional[int] = None  # None: all the calibration prompts
    plain_new_tokens: int = 64
    # Main formats measured only alone: their quality read and their real baseline pipeline
    # timed beside the others, no verify curve: the page's baseline where one is the fastest
    # without a draft (its speedup is read against it), never a pair's main.
    alone_only: tuple[str, ...] = ()


FULL = Plan("full")
LAUNCH = Plan("launch", sparse_fair=True, repeats=3, acceptance_per_main=False, draft_repeats=8, overhead_prompts=1,
              overhead_new_tokens=48, race_overhead_new_tokens=36, overhead_at_k1=False,
              plain_rounds=2, plain_prompts=1, plain_new_tokens=24,
              # On a Zen 4 int4_channel alone was the fastest plain configuration (1.12x int4_sym's), but a
              # pair on it ran 1.00-1.01x int4_sym's pair (BENCHMARKS.md): measured as a pair's main it took
              # Ready from 278 to 403 s there, alone 259 to 341 s.
              alone_only=("int4_channel",))
