"""The pipeline cache's byte budget, as RELIABILITY.md and docs/running.md claim it (issue 21): the
KV-cache pools are counted, a pair that cannot fit gets a sentence, a pipeline that fails
its warm-up is not cached; and the Ray Serve replica's cache (demo.serve.worker.SideCache)
is the same byte-budgeted cache, not a count (item 13). No Ray here.

The runners are stand-ins where a real load would only slow the test: the sizes that matter
are the real fixture's weight files and the pools' setting; the warm-up failure goes
through the real OpenVINORunner with the fixture's real tokenizer.
"""

from __future__ import annotations

import pytest

from demo.core.errors import DemoError
from demo.core.settings import PipelineOptions
from demo.core.streaming import BASELINE, SPECULATIVE
from demo.engine import pipelines
from demo.engine.openvino_runner import OpenVINORunner
from demo.engine.pipelines import PipelineCache, kv_pool_bytes
from demo.serve.worker import SideCache, side_key

GIB = 1 << 30


@pytest.fixture
def loads(monkeypatch):
    """Every side the caches build, as (key, side); the runner is a stand-in."""
    built = []

    def build_side(key, side, status):
        built.append((key, side))
        return object()

    monkeypatch.setattr(pipelines, "build_side", build_side)
    return built


def key(smollm2_ir, side=SPECULATIVE, **options):
    return side_key(side, smollm2_ir, smollm2_ir, "draft", PipelineOptions(**options))


def test_kv_pools_are_counted_in_the_estimate_and_in_the_measured_size(smollm2_ir, loads):
    one, two = key(smollm2_ir), key(smollm2_ir, cache_size_gb=2)
    cache = PipelineCache(budget=1 << 40)
    # main + draft each have a pool of cache_size_gb: one more GB each, two in all
    assert cache.estimate(two, (SPECULATIVE,)) - cache.estimate(one, (SPECULATIVE,)) == 2 * GIB
    assert kv_pool_bytes(one) == 2 * GIB
    cache.get_side(one, SPECULATIVE)
    # the pools become resident only over many runs: the size measured at load adds them
    assert cache.loaded_bytes() >= 2 * GIB


def test_a_pair_that_cannot_fit_gets_a_sentence_and_nothing_is_loaded(smollm2_ir, loads):
    k = key(smollm2_ir)
    cache = PipelineCache(budget=GIB)  # the pools alone take 2 GB
    with pytest.raises(DemoError) as info:
        cache.get_side(k, SPECULATIVE)
    message = str(info.value)
    assert message.startswith("These models need about 2.")
    assert message.endswith(" of memory and this machine allows 1.0 GB; choose a smaller preset or weight format.")
    assert loads == [] and cache.loaded() == []


class BrokenPipe:
    """An LLMPipeline whose every generate() fails as OpenVINO reports it, with the real tokenizer."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def get_tokenizer(self):
        return self.tokenizer

    def generate(self, *args, **kwargs):
        raise RuntimeError("Exception from src/inference.cpp:42:\nout of memory while allocating the KV cache")


def test_a_pipeline_that_fails_its_warm_up_is_not_cached(smollm2_ir, monkeypatch):
    import openvino_genai

    tokenizer = openvino_genai.Tokenizer(str(smollm2_ir))
    attempts = []

    def build_side(key, side, status):
        attempts.append(side)
        pipe = BrokenPipe(tokenizer) if len(attempts) == 1 else None
        return OpenVINORunner(side, pipe) if pipe else object()

    monkeypatch.setattr(pipelines, "build_side", build_side)
    cache = PipelineCache(budget=1 << 40)
    k = key(smollm2_ir, BASELINE)
    with pytest.raises(DemoError, match=r"^The baseline pipeline loaded but failed its warm-up run \(out of memory "
                                        r"while allocating the KV cache\); check the model folder and device\.$"):
        cache.get_side(k, BASELINE)
    assert cache.loaded() == []  # not kept: the next request builds it anew
    cache.get_side(k, BASELINE)
    assert attempts == [BASELINE, BASELINE] and len(cache.loaded()) == 1


def test_the_serve_replicas_cache_is_budgeted_in_bytes_not_by_count(smollm2_ir, loads):
    # Room for one speculative side (2 GB of pools and the weights), not two.
    one_side = PipelineCache(budget=1 << 40).estimate(key(smollm2_ir), (SPECULATIVE,))
    replica = SideCache(SPECULATIVE, budget=one_side + GIB)
    first, second = key(smollm2_ir), key(smollm2_ir, exact=True)
    replica.get(first)
    replica.get(second)
    assert [k for k, _ in replica.pipelines.loaded()] == [second]  # the first was evicted to make room
    assert loads == [(first, SPECULATIVE), (second, SPECULATIVE)]
    replica.get(second)
    assert len(loads) == 2  # kept: no reload

    # With the bytes to hold them, a replica keeps more than the old count of two.
    roomy = SideCache(BASELINE, budget=1 << 40)
    for threads in (1, 2, 3):
        roomy.get(key(smollm2_ir, BASELINE, threads=threads))
    assert len(roomy) == 3

    # And a side that cannot fit even alone is refused with the app's sentence.
    with pytest.raises(DemoError, match="^These models need about .* of memory and this machine allows 0.5 GB; "):
        SideCache(SPECULATIVE, budget=GIB // 2).get(first)
