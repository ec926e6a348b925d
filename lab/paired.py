"""Engines compared the way drift cannot bias: samples taken interleaved (same round, same
prompt), rates at EQUAL token counts, ratios paired per sample. Used by scripts/headline.py.
Pure arithmetic over token arrival times."""

from __future__ import annotations

import statistics
from typing import Optional


def token_times(run) -> list[float]:
    """When each token of an OpenVINO run (a RunResult) arrived, from the call; a speculative
    step's tokens arrive together."""
    return [c.t - run.start for c in run.chunks for _ in c.token_ids]


def decode_rate(times: list[float], n: Optional[int] = None) -> Optional[float]:
    """Tokens per second after the first token over the first `n` tokens (all by default):
    `times[i]` is when token i+1 arrived. Rates of two engines compare only at equal n."""
    n = len(times) if n is None else min(n, len(times))
    if n < 2 or times[n - 1] <= times[0]:
        return None
    return (n - 1) / (times[n - 1] - times[0])


def paired(samples: list[dict], a: str, b: str) -> list[dict]:
    """Per sample ({"round", "prompt", "times": {engine: [arrival times]}}): a's and b's decode
    rates over the first n tokens of both (n: the shorter answer), and a ÷ b."""
    out = []
    for s in samples:
        n = min(len(s["times"][a]), len(s["times"][b]))
        ra, rb = decode_rate(s["times"][a], n), decode_rate(s["times"][b], n)
        if ra and rb:
            out.append({"round": s["round"], "prompt": s["prompt"], "tokens": n, a: ra, b: rb, "ratio": ra / rb})
    return out


def against_fastest(samples: list[dict], a: str, others: list[str]) -> list[dict]:
    """Per sample: a's decode rate over the fastest of `others` in that sample (the best plain
    configuration of the moment: which one is faster moves with the drift), every engine cut
    at the shortest answer of the lot; "fastest" names it."""
    out = []
    for s in samples:
        n = min(len(s["times"][e]) for e in (a, *others))
        ra = decode_rate(s["times"][a], n)
        rates = {e: decode_rate(s["times"][e], n) for e in others}
        if ra and all(rates.values()):
            best = max(rates, key=rates.get)
            out.append({"round": s["round"], "prompt": s["prompt"], "tokens": n, a: ra, **rates, "fastest": best,
                        "ratio": ra / rates[best]})
    return out


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}
