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
        # ... and its summary says the baseline is not the fastest alone; the fair race's does not.
        assert summary.baseline_note is None
        exact_pair = arena.prepare(preset.name, **arena.formats_for(exact))
        assert arena.summarize(results, exact).baseline_note.startswith(
            "The baseline runs gguf, not this machine's fastest without a draft (int8, 50.0 tok/s in fair mode): exact "
            "mode runs one main model on both sides")
        assert exact_pair.baseline is None
    finally:
        arena.cache.clear()
        plain.clear()
        calibration_store.cache_path(session_store, preset.name,
                                     calibration_store.fingerprint(preset, session_store)).unlink(missing_ok=True)


def test_a_baseline_that_is_not_the_fastest_alone_is_said_so_in_one_sentence():
    """Issue 59, item 3: before calibration, in exact mode, with named formats, on a preset
    calibration never measures, the summary says the baseline is not this machine's fastest
    plain configuration, and why; when it is, nothing is said."""
    from types import SimpleNamespace

    from demo.engine.calibration_words import baseline_caveat

    from .calibrations import made_up

    result = made_up({"fair": ("int4_sym", "int4_sym", 4)},
                     baseline={"fair": {"main_format": "int4_channel", "baseline_tok_s": 20.9, "attention": "SDPA"}})
    own = SimpleNamespace(baseline_main_format="int4_sym")       # the speculative side's main on both sides
    fastest = SimpleNamespace(baseline_main_format="int4_channel")
    said = lambda pair, attention="PA", **kw: baseline_caveat(  # noqa: E731
        result, pair, "fair", attention, **{"exact": False, "named": False, "calibratable": True, **kw})
    assert said(fastest, "SDPA") is None
    assert said(own, exact=True) == (
        "The baseline runs int4_sym, not this machine's fastest without a draft (int4_channel on the stateful "
        "backend (SDPA), 20.9 tok/s in fair mode): exact mode runs one main model on both sides, on paged attention, "
        "so that both give the same tokens.")
    assert said(own, named=True).endswith("the request names its weight formats.")
    assert "int4_channel, not this machine's fastest" in said(fastest, "PA")  # the right weights, the other backend
    assert "no calibration of this pair yet" in baseline_caveat(None, own, "fair", "PA", exact=False, named=False,
                                                               calibratable=True)
    assert "models.yaml fixes them" in baseline_caveat(None, own, "fair", "PA", exact=False, named=False, calibratable=False)
    assert baseline_caveat(result, own, "race", "PA", exact=False, named=False, calibratable=True) is None  # none timed
