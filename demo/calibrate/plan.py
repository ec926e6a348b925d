"""How much a calibration measures (demo.calibrate.calibration): the full plan of
`python -m demo.calibrate`, the launch plan `python app.py` runs before it says Ready, and
the formats a launch measures on a CPU class without a profile (launch_formats)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

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


def launch_formats(isa_flags: Sequence[str]) -> tuple[list[str], list[str]]:
    """(main, draft) formats a first launch calibrates: the GGUF-derived IR it already has and
    the compressed format that won on this CPU class (BENCHMARKS.md): int4_sym where integer
    dot products are fast (VNNI or AMX), f16 where only AVX2 (compressed verify steps cost
    nearly K+1 tokens there, f16 barely more than one). The first main format answers the
    acceptance prompts, so the faster one goes first, and a slower format that cannot beat
    it is not measured further. With fast integer kernels the int4_sym draft is a candidate
    too (AMX Xeon, f32 activations: 18 against 24 ms a guess for the gguf IR).
    With fast integer kernels int4_channel (one int4 scale a row) is measured too, alone only
    (Plan.alone_only: its quality and its rate without a draft, no curve): on a Zen 4 its main
    alone is the fastest plain configuration (1.12x int4_sym's), so the speedup the page reads
    is against it; as a pair's main it bought little there and cost 125 s of Ready to measure
    (BENCHMARKS.md), so `python -m demo.calibrate` measures that."""
    fast_int = any(f in isa_flags for f in ("avx512_vnni", "avx_vnni", "amx_int8"))
    if fast_int:
        return ["int4_sym", "gguf", "int4_channel"], ["int4_sym", "gguf"]
    return ["gguf", "f16"], ["gguf"]
