""""Why this speedup?": turn one finished race into the few numbers that explain it.

Speculative decoding wins when checking K+1 tokens in one main-model step costs little
more than producing one token (the step is bound by reading the weights from memory), and
loses when each extra checked token costs arithmetic (BENCHMARKS.md compares CPUs). The
standard model (Leviathan et al.): with τ tokens gained per step, K draft steps of cost d
and one verify step of cost v(K+1), speculative tok/s = τ / (K·d + v(K+1)), against
1 / v(1) for the main model alone.

Everything here comes from OpenVINO's own timers for this run (main and draft inference
time, main-model calls); a calibrated curve, when this machine has one, adds the
prediction made before the race. Pure functions: no OpenVINO, no Gradio.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

# Below this verify-cost ratio per token a step is "memory-bound": checking several
# tokens costs about as much as producing one.
MEMORY_BOUND_PER_EXTRA_TOKEN = 0.25


@dataclass(frozen=True)
class Explanation:
    draft_s: Optional[float]          # speculative side: time in the draft model
    verify_s: Optional[float]         # speculative side: time in the main model
    other_s: Optional[float]          # speculative side: everything else (sampling, streaming, …)
    tokens_per_step: Optional[float]  # τ: tokens each verify step produced
    assistant_tokens: Optional[int]   # K
    verify_step_ms: Optional[float]   # one verify step of K+1 tokens
    base_token_ms: Optional[float]    # one main-model step of 1 token (baseline side)
    cost_ratio: Optional[float]       # verify_step_ms / base_token_ms
    predicted_speedup: Optional[float]  # from the calibrated curve (None without one)
    measured_speedup: Optional[float]
    regime: str                       # one plain sentence
    formats: Optional[str] = None     # "main int8, draft gguf"
    fastest_alone: Optional[str] = None  # "int8 main alone: 14.8 tok/s" from calibration
    under_load: Optional[str] = None  # from how many simultaneous requests speculation stops paying (demo.bench.load)


def _per_call(result) -> Optional[float]:
    if result.ov_main_infer_ms is None or not result.ov_main_calls:
        return None
    return result.ov_main_infer_ms / result.ov_main_calls


def explain(baseline, speculative, measured_speedup: Optional[float], assistant_tokens: Optional[int],
            calibration: Optional[dict] = None) -> Explanation:
    """`baseline`/`speculative` are RunResults; `calibration` is this machine's entry for the
    formats in use (demo.calibrate), with "verify_ms" (list, index M-1 = M tokens),
    "draft_ms", and optionally "predicted_speedup" and "fastest_alone"."""
    wall = speculative.end - speculative.start
    verify_s = speculative.ov_main_infer_ms / 1000 if speculative.ov_main_infer_ms is not None else None
    draft_s = speculative.ov_draft_infer_ms / 1000 if speculative.ov_draft_infer_ms is not None else None
    other_s = max(0.0, wall - (verify_s or 0) - (draft_s or 0)) if verify_s is not None else None
    steps = speculative.ov_main_calls
    tokens = len(speculative.token_ids)
    tau = tokens / steps if steps else None
    verify_ms, base_ms = _per_call(speculative), _per_call(baseline)
    ratio = verify_ms / base_ms if verify_ms and base_ms else None
    step_ratio = None  # a whole speculative step (drafting + verifying) in units of one plain token
    if steps and base_ms and verify_s is not None:
        step_ratio = (verify_s + (draft_s or 0)) * 1000 / steps / base_ms
    predicted = (calibration or {}).get("predicted_speedup")
    return Explanation(
        draft_s=draft_s, verify_s=verify_s, other_s=other_s, tokens_per_step=tau,
        assistant_tokens=assistant_tokens, verify_step_ms=verify_ms, base_token_ms=base_ms,
        cost_ratio=ratio, predicted_speedup=predicted, measured_speedup=measured_speedup,
        regime=regime_sentence(ratio, step_ratio, assistant_tokens, tau),
        formats=(calibration or {}).get("formats"),
        fastest_alone=(calibration or {}).get("fastest_alone"),
        under_load=(calibration or {}).get("under_load"),
    )


def regime_sentence(ratio: Optional[float], step_ratio: Optional[float], k: Optional[int],
                    tau: Optional[float]) -> str:
    if ratio is None or not k:
        return "OpenVINO reported no per-model timings for this run, so the split is unknown."
    checked = k + 1
    extra = (ratio - 1) / k if k else 0.0
    head = f"Checking {checked} tokens cost {ratio:.1f}× one token here: "
    if extra <= MEMORY_BOUND_PER_EXTRA_TOKEN:
        body = "each step is bound by reading the weights from memory, which is where speculation pays"
    else:
        body = "each extra token costs arithmetic, so guesses must be right often to pay off"
    tail = ""
    if tau is not None and step_ratio is not None:
        verdict = "paid off" if tau > step_ratio else "did not pay off"
        tail = (f"; with drafting, a step cost {step_ratio:.1f}× one token and produced {tau:.1f} tokens, "
                f"so speculation {verdict}")
    return head + body + tail + "."
