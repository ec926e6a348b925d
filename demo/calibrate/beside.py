"""Race mode timed as a race: the baseline pipeline decodes beside the speculative one.

In a race both pipelines run at once, each on its share of the cores, and each slows the
other (they share the memory bus and the caches). Timed alone, with the other core idle,
race-mode numbers came out faster than any race shows. So calibration times race mode's
real pipelines together (measure.pipeline_overhead with `beside`): the speculative pipeline
steps through its K and prompts while the baseline answers the same prompts, one after
another, in a thread of its own, until the speculative side is done. This is also what a
launch used to spend a stage of its own on (the main alone with race threads, ~16 s on a
2-core Zen 4): that stage now runs only to choose between formats that come close.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional, Sequence

from ..core.errors import DemoError

MIN_BESIDE_CHUNKS = 3  # a baseline run stopped with the speculative side: kept with this many steps


def time_beside(baseline, prompts: Sequence[str], settings, timed: Callable[[], dict],
                rate: Callable[[list], Optional[float]],
                stop: Optional[threading.Event] = None) -> tuple[dict, list[float], float]:
    """(timed()'s result, the baseline's decode tok/s per run, the share of timed()'s span
    the baseline was decoding beside it). `baseline` is a warm runner (OpenVINORunner); it
    answers `prompts` in turn, round after round, from the moment timed() starts until it
    returns (its last run is stopped then and kept when it had MIN_BESIDE_CHUNKS steps);
    `rate(chunks)` is a run's decode tok/s (measure.decode_tok_s)."""
    done, failed = threading.Event(), []
    rates, spans = [], []

    def keep_going(chunk) -> bool:
        return not done.is_set() and not (stop is not None and stop.is_set())

    def answer() -> None:
        i = 0
        while not done.is_set():
            run = baseline.run(prompts[i % len(prompts)], settings, keep_going)
            i += 1
            if run.error and not done.is_set():
                failed.append(run.error)
                return
            if len(run.chunks) >= MIN_BESIDE_CHUNKS and (tok_s := rate(run.chunks)):
                rates.append(tok_s)
                spans.append((run.chunks[0].t, run.chunks[-1].t))

    thread = threading.Thread(target=answer, name="baseline-beside", daemon=True)
    start = time.perf_counter()
    thread.start()
    try:
        result = timed()
    finally:
        end = time.perf_counter()
        done.set()
        thread.join()
    if failed or not rates:
        raise DemoError(f"The baseline pipeline failed while it was timed beside the speculative one "
                        f"({failed[0] if failed else 'no steps'}); check the prepared models.")
    decoding = sum(max(0.0, min(b, end) - max(a, start)) for a, b in spans)
    return result, rates, decoding / (end - start)
