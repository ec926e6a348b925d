"""Activation precision is a measured, per-machine choice (issue 30): calibration compares the
CPU plugin's own default with f32, ties keep f32, and the app builds every CPU model at what
was chosen; the native guard proves each precision apart."""

from pathlib import Path

import pytest

from demo.calibrate import precision
from demo.core import placement
from demo.core.settings import GenerationSettings, PipelineOptions
from demo.core.streaming import DoneEvent
from demo.engine.arena import Arena, RaceRequest
from demo.engine.pipelines import PipelineCache
from demo.engine.native_guard import NativeConfig
from demo.models import calibration_store

from .calibrations import auto_fixture_presets, saved


def expected_default() -> str:
    """What OpenVINO documents for its CPU plugin: bf16 where the CPU computes it natively
    (AVX512_BF16 or AMX), f32 elsewhere; read from the kernel's flags, not from OpenVINO."""
    flags = set(Path("/proc/cpuinfo").read_text().split())
    return "bf16" if flags & {"avx512_bf16", "amx_bf16"} else "f32"


def rounds(f32_1, other_1, f32_v, other_v) -> dict:
    return {"default": "bf16", "k": 4, "threads": None,
            "rounds": {"f32": {"1": f32_1, "5": f32_v}, "bf16": {"1": other_1, "5": other_v}}}


F32_1, F32_V = [0.050] * 6, [0.070] * 6


def test_the_default_is_chosen_only_where_it_is_faster_even_in_its_worst_round():
    # 20 % faster for a baseline token in every round, the verify no slower: bf16.
    faster = precision.choose(rounds(F32_1, [0.040] * 6, F32_V, [0.070] * 6), 0.020, "int4_sym")
    assert faster["choice"] == "bf16" and faster["baseline_ratio"] == pytest.approx(0.8)
    # A speculative step: (verify + 4 guesses at the main's ratio) over f32's, by hand.
    assert faster["speculative_ratio"] == pytest.approx((0.070 + 4 * 0.020 * 0.8) / (0.070 + 4 * 0.020), abs=1e-3)
    # The launch that read 0.96, 0.95, 0.86, 0.81 (a drift): its worst round is within 5 %, a tie.
    drift = [0.050 * r for r in (0.962, 0.945, 0.864, 0.805, 0.9, 0.9)]
    assert precision.choose(rounds(F32_1, drift, F32_V, F32_V), 0.020, "int4_sym")["choice"] == "f32"
    # Faster in five rounds of six: one round says otherwise, so it is a tie, and ties keep f32.
    mixed = precision.choose(rounds(F32_1, [0.040] * 5 + [0.051], F32_V, F32_V), 0.020, "int4_sym")
    assert mixed["choice"] == "f32" and "not faster" in mixed["reason"]
    # Faster for the baseline, the verify twice as slow (the AMX Xeon's pattern): f32 for both sides.
    split = precision.choose(rounds(F32_1, [0.040] * 6, F32_V, [0.140] * 6), 0.020, "int4_sym")
    assert split["choice"] == "f32" and "slower for the other" in split["reason"]


def test_nothing_to_choose_where_f32_is_the_default_or_nothing_was_measured():
    assert precision.choose({"default": "f32"}, 0.02, "int4_sym")["choice"] == "f32"
    assert "not measured" in precision.choose(None, 0.02, "int4_sym")["reason"]


def test_every_cpu_constructor_gets_the_chosen_precision_and_exact_mode_keeps_f32():
    bf16 = PipelineOptions(cpu_precision="bf16")
    for role, (device, props) in placement.built_with(bf16, "draft").items():
        assert props["INFERENCE_PRECISION_HINT"] == "bf16", role
    assert placement.properties_for("CPU", PipelineOptions())["INFERENCE_PRECISION_HINT"] == "f32"
    exact = PipelineOptions(cpu_precision="bf16", exact=True)
    assert placement.properties_for("CPU", exact)["INFERENCE_PRECISION_HINT"] == "f32"
    assert "bf16 activations" in placement.precision_words(bf16, "draft")


def test_the_guard_proves_each_precision_apart_and_keeps_the_f32_proofs():
    assert NativeConfig("/m/main-int4", "main", 2).key == "main-int4|2"  # as recorded before precision was a choice
    assert NativeConfig("/m/main-int4", "main", 2, precision="bf16").key == "main-int4|2|bf16"
    assert "bf16 activations" in NativeConfig("/m/main-int4", "main", 2, precision="bf16").describe()


def test_the_plugin_default_is_what_openvino_documents_for_this_cpu(smollm2_ir):
    from demo.engine.stateful import StatefulModel

    assert precision.plugin_default() == expected_default()
    model = StatefulModel(smollm2_ir, None, precision=precision.plugin_default())
    try:
        compiled = str(model.compiled.get_property("INFERENCE_PRECISION_HINT"))
        assert {"<Type: 'bfloat16'>": "bf16", "<Type: 'float32'>": "f32"}[compiled] == expected_default()
    finally:
        model.close()


@pytest.fixture
def auto_presets(tmp_path):
    return auto_fixture_presets(tmp_path, "smollm2-prec")


def test_a_race_runs_at_the_precision_calibration_chose(auto_presets, session_store, smollm2_ir):
    preset, chosen = auto_presets.get("smollm2-prec"), expected_default()
    saved(preset, session_store, {"fair": ("gguf", "gguf", 3), "race": ("gguf", "gguf", 3)},
          precision={"choice": chosen, "reason": "test"})
    arena = Arena(auto_presets, session_store, PipelineCache(max_pairs=1))
    request = RaceRequest(prompt="Write a haiku.", preset=preset.name, mode="race",
                          settings=GenerationSettings(max_new_tokens=8, assistant_tokens=3))
    try:
        assert arena.options_for(request).cpu_precision == chosen
        pair = arena.prepare(preset.name, **arena.formats_for(request))
        keys = [c.key for c in arena.native_configs(request, pair, 1)]
        assert all(k.endswith("|bf16") == (chosen == "bf16") for k in keys), keys
        results = {e.side: e.result for e in arena.run(request) if isinstance(e, DoneEvent)}
        assert all(r.error is None and r.token_ids for r in results.values())
        ((key, _),) = arena.cache.loaded()
        assert key.options.cpu_precision == chosen
        assert f"{chosen} activations" in arena.summarize(results, request).how
        exact = RaceRequest(prompt="Write a haiku.", preset=preset.name, mode="race",
                            settings=request.settings, options=PipelineOptions(exact=True))
        assert placement.cpu_precision(arena.options_for(exact)) == "f32"
    finally:
        arena.cache.clear()
        calibration_store.cache_path(session_store, preset.name,
                                     calibration_store.fingerprint(preset, session_store)).unlink(missing_ok=True)
