"""The speedup a visitor reads is against the best this machine does without a draft
(issue 29): where calibration measured another main format fastest alone, the baseline side
runs it, on real OpenVINO inference with the SmolLM2 fixture, and the page says so."""


import pytest

from demo.core.settings import GenerationSettings, PipelineOptions
from demo.core.streaming import BASELINE, DoneEvent
from demo.engine.arena import Arena, RaceRequest
from demo.engine.pipelines import PairKey, PipelineCache
from demo.models import calibration_store

from .calibrations import auto_fixture_presets, saved

PROMPT = "Write a Python function that reverses a string."
SETTINGS = GenerationSettings(max_new_tokens=12, assistant_tokens=3)


@pytest.fixture
def auto_presets(tmp_path):
    return auto_fixture_presets(tmp_path, "smollm2-auto")


def test_a_fair_race_runs_its_baseline_on_the_fastest_plain_format(auto_presets, session_store, smollm2_ir):
    preset = auto_presets.get("smollm2-auto")
    saved(preset, session_store, {"fair": ("gguf", "gguf", 3), "race": ("gguf", "gguf", 3)},
                    baseline={"fair": {"main_format": "int8", "baseline_tok_s": 50.0}})
    arena = Arena(auto_presets, session_store, PipelineCache(max_pairs=1))
    plain = PipelineCache(max_pairs=2)
    try:
        request = RaceRequest(prompt=PROMPT, preset=preset.name, mode="fair", settings=SETTINGS)
        results = {e.side: e.result for e in arena.run(request) if isinstance(e, DoneEvent)}
        int8 = session_store.ready_path(preset.main, "int8")
        gguf = session_store.ready_path(preset.main, "gguf")
        assert int8 is not None and gguf is not None
        ((key, _),) = arena.cache.loaded()
        assert key.main_of(BASELINE) == str(int8) and key.main == str(gguf)
        # Independently: each format's own plain pipeline; the baseline gave int8's tokens.
        alone = {fmt: plain.get_side(PairKey(str(folder), None, "draft", PipelineOptions()), BASELINE)
                 .run(PROMPT, SETTINGS, lambda c: True).token_ids for fmt, folder in (("int8", int8), ("gguf", gguf))}
        assert results[BASELINE].error is None and results[BASELINE].token_ids == alone["int8"]
        summary = arena.summarize(results, request)
        assert summary.weights.startswith("The baseline runs the main model as int8, this machine's fastest without a "
                                          "draft in fair mode, and the speculative side as gguf")
        import html

        from demo.web.render import summary_html

        assert f'<span class="weights">{html.escape(summary.weights)}</span>' in summary_html(summary)
        if alone["int8"] != alone["gguf"]:  # the texts differ because the weights do, and the verdict says so
            assert summary.verdict.endswith("the two sides read different main weights (int8 and gguf)")
        assert arena.calibration_for(request)["formats"] == "main gguf, draft gguf; the baseline's main int8"

        # Exact mode proves equality: one main on both sides, whatever the calibration says.
        exact = RaceRequest(prompt=PROMPT, preset=preset.name, mode="fair", settings=SETTINGS,
                            options=PipelineOptions(exact=True))
        assert arena.formats_for(exact)["baseline_format"] is None
        assert arena.prepare(preset.name, **arena.formats_for(exact)).baseline is None
    finally:
        arena.cache.clear()
        plain.clear()
        calibration_store.cache_path(session_store, preset.name,
                                     calibration_store.fingerprint(preset, session_store)).unlink(missing_ok=True)
