"""KV-cache capacity (issue 21, item 8): a prompt plus its new tokens that the pipeline's
KV pool cannot hold is refused with a sentence that says how much fits, before any side
starts. Sized from the SmolLM2 fixture's real IR; the pool is made small through the
setting the pipelines are built with (PipelineOptions.cache_size_gb)."""

from __future__ import annotations

import pytest

from demo.core.errors import DemoError
from demo.core.settings import GenerationSettings, PipelineOptions
from demo.core.streaming import BASELINE, SPECULATIVE
from demo.engine import kv_capacity
from demo.engine.pipelines import PairKey, PipelineCache, SideInTurn

PROMPT = "Write a Python function that reverses a string."


def test_the_fixture_state_is_read_from_its_ir(smollm2_ir):
    # SmolLM2-135M: 30 layers, K and V each, 3 KV heads of 64 values.
    assert kv_capacity.state_elements(str(smollm2_ir)) == (30 * 2 * 3 * 64, 30 * 2 * 3)
    per_token = kv_capacity.bytes_per_token(str(smollm2_ir), PipelineOptions(), "CPU")
    assert per_token == 11_520 + 8 * 180  # u8 values, a scale and zero point per head
    assert kv_capacity.bytes_per_token(str(smollm2_ir), PipelineOptions(exact=True), "CPU") == 4 * 11_520
    # The real 1 GB pool holds ~80,000 tokens of this model: far more than any prompt the demo takes.
    assert kv_capacity.pool_tokens(str(smollm2_ir), PipelineOptions(), "CPU") > 80_000


def side(smollm2_ir, which: str, cache_size_gb: float, method: str = "draft", exact: bool = False) -> SideInTurn:
    options = PipelineOptions(cache_size_gb=cache_size_gb, exact=exact)  # type: ignore[arg-type]
    key = PairKey(str(smollm2_ir), str(smollm2_ir) if method == "draft" else None, method, options)
    return SideInTurn(PipelineCache(budget=1 << 40), key, which)


def test_a_prompt_that_overflows_a_small_pool_is_refused_with_what_fits(smollm2_ir):
    small = 3 * 414_720 / (1 << 30)  # three 32-token blocks of this model's u8 KV: 96 tokens
    baseline = side(smollm2_ir, BASELINE, small)
    assert baseline.kv_tokens == 96
    baseline.check_prompt(PROMPT, GenerationSettings(max_new_tokens=16))  # fits
    with pytest.raises(DemoError) as info:
        baseline.check_prompt(PROMPT, GenerationSettings(max_new_tokens=200))
    message = str(info.value)
    assert message.startswith("The prompt (") and "plus 200 new tokens needs more KV cache than the baseline " \
        "pipeline's pool holds: at most 96 tokens in all fit" in message
    assert message.endswith("so shorten the prompt or lower max new tokens.")

    # The speculative side: a step may write K draft tokens past the last it keeps.
    speculative = side(smollm2_ir, SPECULATIVE, small)
    with pytest.raises(DemoError, match="speculative pipeline's pool holds: at most 91 tokens in all fit"):
        speculative.check_prompt(PROMPT, GenerationSettings(max_new_tokens=80, assistant_tokens=5))


def test_exact_mode_takes_four_times_the_room(smollm2_ir):
    pool = 8 * 414_720 / (1 << 30)  # 256 tokens of u8 KV, but f32 in exact mode
    assert side(smollm2_ir, BASELINE, pool).kv_tokens == 256
    exact = side(smollm2_ir, BASELINE, pool, exact=True)
    assert exact.kv_tokens == 32 * (pool * (1 << 30) // (4 * 11_520 * 32))
    with pytest.raises(DemoError, match="needs more KV cache than the baseline pipeline's pool"):
        exact.check_prompt(PROMPT, GenerationSettings(max_new_tokens=128))
