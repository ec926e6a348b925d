"""Calibration on the SmolLM2 fixture: the verify-cost curve is measured for real, the
model's arithmetic is checked by hand, and the choice is the best candidate that fits."""

import json

import pytest

from demo import calibrate
from demo.errors import DemoError

K_MAX = 3


@pytest.fixture(scope="module")
def result(presets, session_store, smollm2_ir):
    return calibrate.calibrate(presets.get("smollm2-self-draft"), session_store, main_formats=["gguf"],
                               draft_formats=["gguf"], k_max=K_MAX, max_new_tokens=32,
                               prompts=["Write a Python function that reverses a string."])


def test_curve_is_measured_for_every_step_size_and_mode(result):
    curves = result["main"]["gguf"]["verify_s"]
    assert set(curves) == {"fair", "race"}
    for curve in curves.values():
        assert len(curve) == K_MAX + 1 and all(0 < v < 5 for v in curve)
    assert result["main"]["gguf"]["memory_bytes"] > 10 << 20  # a compiled 135M model is not free
    assert all(0 < v < 5 for v in result["draft"]["gguf"]["step_s"].values())


def test_acceptance_comes_from_real_steps(result):
    accepted = result["accepted_per_step"]
    assert accepted and all(0 <= a <= K_MAX for a in accepted)
    # The fixture drafts for itself: almost every guess is right.
    assert result["acceptance"] > 0.5


def test_choice_is_the_fastest_fitting_candidate(result):
    for mode, choice in result["choice"].items():
        pool = [c for c in result["candidates"] if c["mode"] == mode and c["fits"]]
        assert choice["speculative_tok_s"] == max(c["speculative_tok_s"] for c in pool)
        assert 1 <= choice["k"] <= K_MAX


def test_result_is_cached_per_machine_and_reused(result, presets, session_store):
    cached = calibrate.load_cached(session_store, presets.get("smollm2-self-draft"))
    assert cached["choice"] == json.loads(json.dumps(result["choice"]))
    assert cached["fingerprint"]["isa_flags"] == result["fingerprint"]["isa_flags"]


def test_format_auto_resolves_to_the_calibrated_choice(result, presets, session_store):
    from demo import formats

    spec = presets.get("smollm2-self-draft").main
    assert formats.resolve_auto_format(spec, "main model", session_store) == result["choice"]["race"]["main_format"]
    assert calibrate.calibrated_format(spec, session_store, "fair") == result["choice"]["fair"]["main_format"]
    # Another machine's (or a damaged) calibration is never used.
    other = session_store.cache_dir / "calibration" / "smollm2-self-draft-elsewhere.json"
    other.write_text(json.dumps({**json.loads(json.dumps(result)), "fingerprint": {**result["fingerprint"], "cores": 999},
                                 "choice": {"race": {"main_format": "f16"}}}))
    (session_store.cache_dir / "calibration" / "broken.json").write_text("{not json")
    try:
        assert calibrate.calibrated_format(spec, session_store) == result["choice"]["race"]["main_format"]
    finally:
        other.unlink()
        (session_store.cache_dir / "calibration" / "broken.json").unlink()


def test_prediction_arithmetic_by_hand():
    verify = [0.100, 0.110, 0.120, 0.130]  # M = 1..4 tokens
    accepted = [3, 3, 1, 0]                 # guesses accepted per step, measured with K = 3
    p = calibrate.predict(verify, 0.020, accepted, 2)
    tau = 1 + (2 + 2 + 1 + 0) / 4           # min(a, 2)
    assert p["tokens_per_step"] == pytest.approx(tau)
    assert p["step_s"] == pytest.approx(2 * 0.020 + 0.120)
    assert p["speculative_tok_s"] == pytest.approx(tau / 0.160)
    assert p["baseline_tok_s"] == pytest.approx(10.0)


def test_nothing_fits_a_tiny_budget(presets, session_store, smollm2_ir):
    with pytest.raises(DemoError, match="fits in 0.0 GB of memory"):
        calibrate.calibrate(presets.get("smollm2-self-draft"), session_store, main_formats=["gguf"],
                            draft_formats=["gguf"], k_max=1, max_new_tokens=8, budget=1,
                            prompts=["Hi"])
