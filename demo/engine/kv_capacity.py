"""How many tokens a pipeline's KV-cache pool holds, so that a prompt plus its new tokens
that cannot fit is refused with a sentence before either side starts.

The continuous-batching scheduler gets a fixed pool (SchedulerConfig.cache_size, in GB:
placement.scheduler_settings): one for the baseline's main model, and in the speculative
pipeline one for the main model and another for the draft (pipelines.kv_pool_bytes). A
token takes, in each layer, a key and a value for every KV head: the IR's state variables
(`ReadValue` ops, one per layer and K or V, shaped [batch, kv heads, tokens, head dim]) say
how many elements; the KV precision says how many bytes each. Read from the IR, not
config.json, because GGUF-made IR folders have no config.json.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Optional

from ..core import placement
from ..core.settings import PipelineOptions, uses_draft_model
from ..core.streaming import SPECULATIVE

BLOCK_TOKENS = 32  # the CPU plugin's KV block; a run takes whole blocks
# u8 KV (the CPU plugin's default here: KV_CACHE_PRECISION reads uint8_t) keeps a f32 scale
# and zero point per token and head beside the values.
U8_EXTRA_BYTES = 8
_SHAPE = re.compile(r'type="ReadValue"[^>]*>\s*<data [^>]*variable_shape="([^"]*)"')


@functools.lru_cache(maxsize=32)
def state_elements(folder: str) -> Optional[tuple[int, int]]:
    """(values per token, heads per token) over all KV state variables of the model in
    `folder`; None when its IR has no such state (a stateless export, or no IR)."""
    try:
        text = (Path(folder) / "openvino_model.xml").read_text(errors="replace")
    except OSError:
        return None
    values = heads = 0
    for shape in _SHAPE.findall(text):
        dims = [d.strip() for d in shape.split(",")]
        if len(dims) != 4 or not (dims[1].isdigit() and dims[3].isdigit()):
            continue  # not a [batch, heads, tokens, head dim] KV variable
        values += int(dims[1]) * int(dims[3])
        heads += int(dims[1])
    return (values, heads) if values else None


def bytes_per_token(folder: str, options: PipelineOptions, device: str) -> Optional[int]:
    """KV bytes one token takes in the model's pool on `device` (None: unknown)."""
    elements = state_elements(folder)
    if elements is None:
        return None
    values, heads = elements
    if options.exact:
        return 4 * values  # EXACT_PROPERTIES: KV_CACHE_PRECISION f32
    if placement.kind(device) == "CPU":
        return values + U8_EXTRA_BYTES * heads
    return 2 * values  # f16 on a GPU


def pool_tokens(folder: str, options: PipelineOptions, device: str) -> Optional[int]:
    """Tokens one pool of `options.cache_size_gb` holds for this model, in whole blocks."""
    per_token = bytes_per_token(folder, options, device)
    if not per_token:
        return None
    pool = placement.scheduler_settings(options).cache_size_gb * (1 << 30)
    return int(pool // (per_token * BLOCK_TOKENS)) * BLOCK_TOKENS


def side_capacity(main: str, draft: Optional[str], side: str, method: str,
                  options: PipelineOptions) -> Optional[int]:
    """Tokens (prompt + new + a speculative step's slack) the side's smallest pool holds;
    None where there is no scheduler pool (the stateful backend) or nothing is known."""
    if placement.stateful(options, method) or (side == SPECULATIVE and method == "free_draft"):
        return None  # a stateful model's KV cache grows as it needs
    pools = [pool_tokens(main, options, options.main_device)]
    if side == SPECULATIVE and uses_draft_model(method) and draft:
        pools.append(pool_tokens(draft, options, options.draft_device))
    known = [p for p in pools if p is not None]
    return min(known) if known else None


def tokens_needed(n: int) -> int:
    """Tokens a run of `n` tokens takes in its pool: whole blocks."""
    return -(-n // BLOCK_TOKENS) * BLOCK_TOKENS
