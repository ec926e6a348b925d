"""Activation precision as a measured, per-machine choice (issue 30).

The CPU plugin computes in bf16 by default where the CPU has it (avx512_bf16, AMX) and in
f32 elsewhere. For compressed weights f32 was the faster choice on both Xeons measured
(AMX: 48.1 against 72.7 ms a token, a 7-token verify 69 against 139 ms; the Xeon without
AMX: the speculative side 1.2x) and neutral on a Zen 4, so f32 is the prior, and the
plugin's own default replaces it only where this machine measures it faster.

How: in the first main format's stage (the one a CPU runs fastest on every class seen,
PREFERRED), with its f32 model already loaded, the same IR is compiled again at the
plugin's default, and both are stepped in turn (measure.interleaved_costs): one token (the
baseline's step) and K_TYPICAL + 1 tokens (a speculative verify). choose() pairs the two
round by round. A speculative step is the verify plus K_TYPICAL draft guesses; the draft runs
the same compressed-weight kernels at one token, so its guesses are taken to scale as the
main's one-token step does (one more compile per draft format would cost a launch seconds
it does not have). The default wins only if it is faster by TIE even in its least favourable
round for one side, and not slower beyond TIE (median) for the other; anything else is a tie,
and ties keep f32.
"""

from __future__ import annotations

from statistics import median
from typing import Optional, Sequence

PRIOR = "f32"
PREFERRED = ("int4_sym", "int8", "gguf", "f16")  # the smallest weights first
K_TYPICAL = 4  # the K calibration chose on every CPU class so far (1..7): the verify is M = 5
# Faster means faster by TIE in the LEAST favourable round. A launch on a Zen 4 read bf16 at
# 0.96, 0.95, 0.86, 0.81 of f32 round after round (a drift, not the precision: 12 rounds later,
# scripts/experiments/precision_rounds.py, read 1.01, single rounds 0.80-1.33), while the effects
# that matter are larger and steady (the AMX Xeon's bf16 verify took 2x f32's).
TIE = 0.05
ROUNDS = 6  # of BLOCK steps of each size per model: the second compile, not these, is the stage's cost
BLOCK = 3
NAMES = {"f32": "f32", "bf16": "bf16", "f16": "f16", "float32": "f32", "bfloat16": "bf16", "float16": "f16"}


def plugin_default() -> str:
    """The activation precision the CPU plugin uses when told nothing, on this CPU."""
    import openvino as ov

    hint = ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT")
    return NAMES.get(str(getattr(hint, "type_name", hint)).lower(), str(hint))


def measured_format(main_formats: Sequence[str]) -> Optional[str]:
    """The main format whose stage measures precision."""
    return next((f for f in PREFERRED if f in main_formats), main_formats[0] if main_formats else None)


def measure(f32_model, folder, threads: Optional[int], default: str, rounds: int = ROUNDS) -> dict:
    """In a stage child, beside the main format's loaded f32 model: the plugin's `default`
    precision (not f32) against f32, stepped in turn."""
    from .measure import interleaved_costs
    from ..engine.stateful import StatefulModel

    other = StatefulModel(folder, threads, precision=default)
    try:
        costs = interleaved_costs({PRIOR: f32_model, default: other}, (1, K_TYPICAL + 1), rounds, BLOCK)
    finally:
        other.close()
    return {"default": default, "threads": threads, "k": K_TYPICAL,
            "rounds": {p: {str(m): seconds for m, seconds in by_m.items()} for p, by_m in costs.items()}}


def choose(measured: Optional[dict], draft_step_s: Optional[float], main_format: Optional[str]) -> dict:
    """The precision the app's pipelines get, from measure()'s rounds and the fastest draft's
    f32 guess (`draft_step_s`): the fields of calibration_result.PrecisionChoice."""
    if not measured:
        return {"choice": PRIOR, "reason": "not measured (the plugin's default crashed here, or the main format "
                                           "did not run): f32, the prior"}
    default = measured["default"]
    if default == PRIOR:
        return {"choice": PRIOR, "default": default,
                "reason": "f32 is the CPU plugin's own default here: nothing to choose"}
    r, k, v = measured["rounds"], measured["k"], str(measured["k"] + 1)
    d = draft_step_s or 0.0
    base = [b / f for b, f in zip(r[default]["1"], r[PRIOR]["1"])]
    spec = [(vb + k * d * (b / f)) / (vf + k * d)
            for vb, vf, b, f in zip(r[default][v], r[PRIOR][v], r[default]["1"], r[PRIOR]["1"])]
    out = {"default": default, "measured_on": main_format, "threads": measured.get("threads"),
           "baseline_ratio": round(median(base), 3), "speculative_ratio": round(median(spec), 3),
           "baseline_ratios": [round(x, 3) for x in base], "speculative_ratios": [round(x, 3) for x in spec]}

    def faster(ratios):
        return max(ratios) < 1 - TIE

    def not_slower(ratios):
        return median(ratios) <= 1 + TIE

    said = (f"{default} against f32: {out['baseline_ratio']:.2f}× the time of a baseline token, "
            f"{out['speculative_ratio']:.2f}× a speculative step at K={k} ({main_format} main, {len(base)} rounds in turn)")
    if (faster(base) and not_slower(spec)) or (faster(spec) and not_slower(base)):
        return {**out, "choice": default, "reason": f"{said}: {default} is faster here"}
    if faster(base) or faster(spec):
        return {**out, "choice": PRIOR, "reason": f"{said}: faster for one side, slower for the other: f32 kept"}
    return {**out, "choice": PRIOR, "reason": f"{said}: not faster by {TIE:.0%} in every round: f32 kept"}
