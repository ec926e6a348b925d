""""Why this speedup?": turn one finished race into the few numbers that explain it.

Speculative decoding wins when checking K+1 tokens in one main-model step costs little
more than producing one token (the step is bound by reading the weights from memory), and
loses when each extra checked token costs arithmetic (BENCHMARKS.md compares CPUs). The
standard model (Leviathan et al.): with τ tokens gained per step, K draft steps of cost d
and one verify step of cost v(K+1), speculative tok/s = τ / (K·d + v(K+1)), against
1 / v(1) for the main model alone.

Per-step costs come from OpenVINO's per-step timers over the verify steps only: the prompt's
step (and with it every prefill call) is left out, so a long prompt does not make a step look
dear. Both sides' timers time the same function, the main model's ContinuousBatchingImpl::step()
(baseline: raw_metrics.token_infer_durations; speculative: main_model_metrics' raw m_durations,
which times the main pipeline's step() inside each speculative step). Where OpenVINO's timers
read nothing (prompt lookup reports 0 ms for every step), both sides fall back to one other
clock, the time between consecutive chunks at our streamer. τ, the tokens per step, is
demo.core.metrics'. The time split of the bar is the whole run's (prefill included).
A calibrated curve, when this machine has one, adds the prediction made before the race.
Pure functions: no OpenVINO, no Gradio.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from .metrics import tokens_per_step, verify_step_sizes

# Below this verify-cost ratio per token a step is "memory-bound": checking several
# tokens costs about as much as producing one.
MEMORY_BOUND_PER_EXTRA_TOKEN = 0.25


@dataclass(frozen=True)
class Explanation:
    draft_s: Optional[float]          # speculative side: time in the draft model (whole run)
    verify_s: Optional[float]         # speculative side: time in the main model (whole run)
    other_s: Optional[float]          # speculative side: everything else (sampling, streaming, …)
    tokens_per_step: Optional[float]  # τ over the verify steps (demo.core.metrics)
    assistant_tokens: Optional[int]   # K (None for a confidence threshold)
    verify_step_ms: Optional[float]   # the main model's step in a verify step (mean, prompt's step left out)
    base_token_ms: Optional[float]    # the main model's step on the baseline side (same scope)
    cost_ratio: Optional[float]       # verify_step_ms / base_token_ms
    predicted_speedup: Optional[float]  # from the calibrated curve (None without one)
    measured_speedup: Optional[float]
    regime: str                       # one plain sentence
    formats: Optional[str] = None     # "main int8, draft gguf"
    fastest_alone: Optional[str] = None  # "int8 main alone: 14.8 tok/s" from calibration
    reference: Optional[str] = None      # "llama.cpp on this machine, no draft: 21.6 tok/s ..." from calibration
    under_load: Optional[str] = None  # from how many simultaneous requests speculation stops paying (demo.bench.load)
    guesses: str = ""                 # what one verify step checked, in words ("4 guesses + 1")
    timer: str = "OpenVINO's per-step timers"  # where the per-step costs come from


def verify_steps_mean(per_step: Optional[Sequence[float]]) -> Optional[float]:
    """Mean of a per-step list over the verify steps: the first entry, the prompt's step, is
    left out (it holds the prefill)."""
    steps = list(per_step or [])[1:]
    return sum(steps) / len(steps) if steps else None


def chunk_gaps_ms(chunks: Sequence) -> list[float]:
    """Per step, the time since the previous chunk at our streamer; the first chunk's entry is
    TTFT-like and only a placeholder (verify_steps_mean leaves it out)."""
    times = [c.t for c in chunks]
    return [0.0] + [(b - a) * 1000 for a, b in zip(times, times[1:])]


def _guesses(method: str, k: Optional[int], per_step: Optional[float]) -> str:
    if method == "prompt_lookup":
        return f"up to {k} looked-up guesses + 1" if k else "looked-up guesses + 1"
    if k:
        return f"{k} guesses + 1"
    if per_step is not None:
        return f"{per_step:.1f} guesses on average + 1 (confidence threshold)"
    return "a varying number of guesses + 1 (confidence threshold)"


def explain(baseline, speculative, measured_speedup: Optional[float], assistant_tokens: Optional[int],
            calibration: Optional[dict] = None, method: str = "draft") -> Explanation:
    """`baseline`/`speculative` are RunResults; `assistant_tokens` is K, None for a confidence
    threshold; `calibration` is this machine's entry for the formats in use (demo.calibrate),
    with optionally "predicted_speedup", "formats", "fastest_alone" and "reference"."""
    wall = speculative.end - speculative.start
    verify_s = speculative.ov_main_infer_ms / 1000 if speculative.ov_main_infer_ms is not None else None
    draft_s = speculative.ov_draft_infer_ms / 1000 if speculative.ov_draft_infer_ms is not None else None
    other_s = max(0.0, wall - (verify_s or 0) - (draft_s or 0)) if verify_s is not None else None
    sizes = verify_step_sizes(speculative.chunks)
    tau = tokens_per_step(sizes)
    verify_ms = verify_steps_mean(speculative.ov_main_step_ms)
    base_ms = verify_steps_mean(baseline.ov_main_step_ms)
    step_ms = verify_steps_mean(speculative.ov_step_ms)
    timer = "OpenVINO's per-step timers"
    if verify_ms is None or base_ms is None:  # one clock for both sides, never one of each
        timer = "the time between steps at the streamer"
        verify_ms = step_ms = verify_steps_mean(chunk_gaps_ms(speculative.chunks))
        base_ms = verify_steps_mean(chunk_gaps_ms(baseline.chunks))
    ratio = verify_ms / base_ms if verify_ms and base_ms else None
    # A whole speculative step (drafting + verifying) in units of one plain step.
    step_ratio = step_ms / base_ms if step_ms and base_ms else None
    # Guesses per verify step: K, or (a threshold) OpenVINO's drafted count over the steps it
    # counted, which are all verify steps but the last (demo.core.metrics).
    k = assistant_tokens
    drafted = speculative.ov_draft_tokens
    per_step = k if k else (drafted / max(1, len(sizes) - 1) if drafted is not None and sizes else None)
    checked = None if method == "prompt_lookup" or per_step is None else per_step + 1
    predicted = (calibration or {}).get("predicted_speedup")
    return Explanation(
        draft_s=draft_s, verify_s=verify_s, other_s=other_s, tokens_per_step=tau,
        assistant_tokens=k, verify_step_ms=verify_ms, base_token_ms=base_ms,
        cost_ratio=ratio, predicted_speedup=predicted, measured_speedup=measured_speedup,
        regime=regime_sentence(ratio, step_ratio, checked, tau),
        formats=(calibration or {}).get("formats"),
        fastest_alone=(calibration or {}).get("fastest_alone"),
        reference=(calibration or {}).get("reference"),
        under_load=(calibration or {}).get("under_load"),
        guesses=_guesses(method, k, per_step), timer=timer,
    )


def regime_sentence(ratio: Optional[float], step_ratio: Optional[float], checked: Optional[float],
                    tau: Optional[float]) -> str:
    """`checked`: tokens one verify step checked (guesses + 1; a mean for a confidence
    threshold), None when unknown (prompt lookup finds a varying number of guesses)."""
    if ratio is None:
        return "This run gave no per-step times (neither OpenVINO's timers nor the stream), so the split is unknown."
    tail = ""
    if tau is not None and step_ratio is not None:
        verdict = "paid off" if tau > step_ratio else "did not pay off"
        tail = (f"; with drafting, a step cost {step_ratio:.1f}× one token and produced {tau:.1f} tokens, "
                f"so speculation {verdict}")
    if checked is None or checked <= 1:
        return f"A verify step cost {ratio:.1f}× one plain step here" + tail + "."
    extra = (ratio - 1) / (checked - 1)
    head = f"Checking {checked:g} tokens cost {ratio:.1f}× one token here: " if float(checked).is_integer() else \
        f"Checking {checked:.1f} tokens on average cost {ratio:.1f}× one token here: "
    if extra <= MEMORY_BOUND_PER_EXTRA_TOKEN:
        body = "each step is bound by reading the weights from memory, which is where speculation pays"
    else:
        body = "each extra token costs arithmetic, so guesses must be right often to pay off"
    return head + body + tail + "."
