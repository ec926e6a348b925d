"""What this machine's calibration (demo.calibrate) says about one race, in the page's words:
the prediction for its formats, mode and K against the baseline it races, the fastest plain
configuration measured in its mode (and a coarser format left unmeasured, which can be faster
alone), and llama.cpp's plain decoding as a reference. Pure: it
reads a Calibration and the prepared pair's formats."""

from __future__ import annotations

from statistics import median
from typing import Optional

from ..models.calibration_result import Calibration, backend_words, origin_words, plain_key, plain_words, split_plain_key
from ..models.formats import COARSE


def calibration_words(result: Calibration, pair, mode: str, k: Optional[int]) -> dict:
    """{"predicted_speedup", "formats", "fastest_alone", "reference"} for a race in `mode`
    ("fair" or "race") at K=`k` on `pair` (a PreparedPair: its formats)."""
    match = [c for c in result.candidates if c.mode == mode and c.k == k
             and c.main_format == pair.main_format and c.draft_format == pair.draft_format]
    measured = result.baseline.get(mode)
    plain = result.plain.get(mode)
    # A confirmed profile's rates were measured on the machine its profile came from, not here.
    where = ("on another machine of this CPU class (its profile)" if result.origin is not None
             and result.origin.confirmed else "on this machine")
    fastest = None
    if plain is not None:
        rates = {f: median(r) for f, r in plain.rates.items() if r}
        # One definition of "fastest": the baseline calibration chose for this mode (plain_choice
        # and the paged-attention rule, demo.calibrate.cost_model), the configuration the race runs.
        if measured is not None:
            best = plain_key(measured.main_format, measured.attention)
            rates[best] = measured.baseline_tok_s
        else:
            best = max(rates, key=rates.get)
        threads = '1 thread' if mode == 'race' and result.threads.get('race') == 1 else mode + ' threads'
        fmt, attention = split_plain_key(best)
        fastest = (f"{fmt} main alone{backend_words(attention)}, {rates[best]:.1f} tok/s after the first token, "
                   f"measured by calibration {where} in {mode} mode ({threads})" if plain.beside is None else
                   f"{best} main without a draft, {rates[best]:.1f} tok/s after the first token, measured by "
                   f"calibration {where} beside the {plain.beside} speculative pipeline, as in a race ({threads})")
        samples = len(plain.rates.get(best) or [])
        if samples:  # what the decision rests on (issue 59, item 5)
            if plain.beside:
                paired = " paired with the speculative side's"
            elif plain.interleaved:
                paired = " paired with every other configuration's"
            else:
                paired = ", timed one after another (no tie is claimed)"
            fastest += f", the median of {samples} samples{paired}"
        fastest += f"; these choices {origin_words(result.origin)}"
        unmeasured = [f for f in COARSE if f not in result.main]
        if unmeasured:  # a launch without fast integer kernels leaves int4_channel out (docs/speed.md)
            fastest += (f"; not measured: {', '.join(unmeasured)} (one int4 scale a row: on some CPUs faster alone, "
                        "at a coarser fit; python -m demo.calibrate measures it)")
    reference = None
    llama = result.plain["fair"].reference.get("llama.cpp") if "fair" in result.plain else None
    if llama:
        reference = (f"llama.cpp {where}, no draft: {median(llama):.1f} tok/s after the first token "
                     f"(the same GGUF and prompts as the baseline, timed beside it by calibration, all cores)")
    predicted = None
    if match:
        # Against what the baseline really runs here: the measured fastest alone, when there is one.
        predicted = match[0].speculative_tok_s / (measured.baseline_tok_s if measured else match[0].baseline_tok_s)
    formats = f"main {pair.main_format}, draft {pair.draft_format}"
    if pair.baseline is not None:
        formats += f"; the baseline's main {pair.baseline_format}"
    if measured is not None and measured.attention != "PA" and pair.baseline_format is not None:
        formats += f"; the baseline{backend_words(measured.attention)}"
    return {"predicted_speedup": predicted, "formats": formats, "fastest_alone": fastest, "reference": reference}


def baseline_caveat(result: Optional[Calibration], pair, mode: str, attention: str, *, exact: bool,
                    named: bool, calibratable: bool) -> Optional[str]:
    """One sentence when the baseline a race runs is not this machine's fastest plain
    configuration in `mode` (the one every speedup is meant to be read against), saying why;
    None when it is. `pair`: the PreparedPair (its formats), `attention`: the backend the
    baseline runs on ("PA" or "SDPA"), `named`: the request chose its weight formats,
    `calibratable`: calibration chooses the pair's formats (models.yaml's `format: auto`)."""
    if not calibratable:
        return ("Calibration does not choose this pair's weights (models.yaml fixes them, or the pair runs as "
                "shipped), so its baseline is its own main model, not a configuration measured fastest here.")
    if result is None:
        return ("This machine has no calibration of this pair yet (a first launch measures it before it says Ready), "
                "so the baseline may not be the fastest this machine does without a draft.")
    fastest = result.baseline.get(mode)
    if fastest is None:
        return None
    runs = plain_key(pair.baseline_main_format, attention)
    best = plain_key(fastest.main_format, fastest.attention)
    if runs == best:
        return None
    why = ("exact mode runs one main model on both sides, on paged attention, so that both give the same tokens"
           if exact else "the request names its weight formats" if named else
           "this race reads other weights than calibration chose for it")
    return (f"The baseline runs {plain_words(runs)}, not this machine's fastest without a draft ({plain_words(best)}, "
            f"{fastest.baseline_tok_s:.1f} tok/s in {mode} mode): {why}.")
