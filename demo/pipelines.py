"""OpenVINO GenAI pipelines: the baseline (main model alone) and the speculative one
(main model verifying guesses from a draft model, or from prompt lookup).

This is the only module besides demo.sources/demo.prepare that imports openvino.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from .errors import DemoError
from .settings import MAX_PROMPT_TOKENS, GenerationSettings, PipelineOptions
from .streaming import BASELINE, SPECULATIVE, Chunk, IncrementalDetokenizer

# Greedy outputs of the baseline and speculative pipelines match exactly only with all
# three (models.md): the multi-token verify step otherwise runs in bf16 with other kernels
# and near-ties flip. Any subset was not enough.
EXACT_PROPERTIES = {
    "INFERENCE_PRECISION_HINT": "f32",
    "KV_CACHE_PRECISION": "f32",
    "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0",
}

OnChunk = Callable[[Chunk], bool]  # return False to stop generating


def available_devices() -> list[str]:
    import openvino

    return list(openvino.Core().available_devices)


def check_device(device: str, role: str) -> None:
    devices = available_devices()
    if device not in devices:
        raise DemoError(
            f"The {role} device {device!r} is not available on this machine; choose one of: {', '.join(devices)}."
        )


@dataclass
class RunResult:
    """One side's finished (or stopped, or failed) run."""

    side: str
    start: float
    end: float
    chunks: list[Chunk] = field(default_factory=list)
    cancelled: bool = False
    error: Optional[str] = None
    # Figures OpenVINO itself reports (perf_metrics / extended_perf_metrics); None when absent.
    ov_generated_tokens: Optional[int] = None
    ov_ttft_ms: Optional[float] = None
    ov_tpot_ms: Optional[float] = None
    ov_accepted_tokens: Optional[int] = None
    ov_draft_tokens: Optional[int] = None

    @property
    def token_ids(self) -> list[int]:
        return [t for c in self.chunks for t in c.token_ids]

    @property
    def text(self) -> str:
        return "".join(c.text for c in self.chunks)


def _properties(options: PipelineOptions) -> dict:
    props: dict = {}
    if options.exact:
        props.update(EXACT_PROPERTIES)
    if options.threads is not None:
        # One thread per pipeline, and no pinning: with pinning both pipelines' threads
        # land on the same core (measured: 1.0 core used of 2).
        props.update({"INFERENCE_NUM_THREADS": options.threads, "ENABLE_CPU_PINNING": False})
    return props


class OpenVINORunner:
    """One side of the race: an LLMPipeline plus what it takes to stream it."""

    def __init__(self, side: str, pipe, warmup: bool = True):
        import openvino_genai

        self._ov = openvino_genai
        self.side = side
        self.pipe = pipe
        self.tokenizer = pipe.get_tokenizer()
        self._lock = threading.Lock()  # one generate() at a time per pipeline
        if warmup:
            # The first generate() after load compiles kernels: 4–12 s to first token on the
            # 1.5B. Pay that now, not in the first run a visitor watches.
            self.run("Hi", GenerationSettings(max_new_tokens=4), lambda c: True)

    def template(self, prompt: str) -> str:
        """Apply the model's chat template when it has one (instruct models do)."""
        if not self.tokenizer.chat_template:
            return prompt
        return self.tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True
        )

    def count_tokens(self, text: str) -> int:
        return int(self.tokenizer.encode(text).input_ids.get_shape()[-1])

    def _config(self, s: GenerationSettings):
        c = self._ov.GenerationConfig()
        c.max_new_tokens = s.max_new_tokens
        c.apply_chat_template = False  # applied by template(), identically for both sides
        if s.sampling:
            c.do_sample = True
            c.temperature = s.temperature
            c.top_p = s.top_p
            c.rng_seed = s.seed
        if self.side == SPECULATIVE:
            if s.confidence_threshold is not None:
                c.assistant_confidence_threshold = s.confidence_threshold
            else:
                c.num_assistant_tokens = s.assistant_tokens
            if s.method == "prompt_lookup":
                c.max_ngram_size = s.max_ngram_size
        return c

    def run(self, prompt: str, settings: GenerationSettings, on_chunk: OnChunk,
            on_start: Callable[[float], None] = lambda t: None) -> RunResult:
        ov = self._ov
        detok = IncrementalDetokenizer(lambda ids: self.tokenizer.decode(list(ids)))
        templated = self.template(prompt)
        n_prompt = self.count_tokens(templated)
        if n_prompt > MAX_PROMPT_TOKENS:
            raise DemoError(
                f"The prompt is {n_prompt} tokens long; this demo accepts at most {MAX_PROMPT_TOKENS}, so shorten it."
            )
        result = RunResult(self.side, start=0.0, end=0.0)
        side = self.side

        class _Streamer(ov.StreamerBase):
            def write(self, token) -> "ov.StreamingStatus":
                now = time.perf_counter()
                ids = tuple(token) if isinstance(token, list) else (token,)
                accepted_text, last_text = detok.feed(ids)
                chunk = Chunk(side, ids, accepted_text + last_text,
                              accepted_text if side == SPECULATIVE else "", now)
                result.chunks.append(chunk)
                if not on_chunk(chunk):
                    result.cancelled = True
                    return ov.StreamingStatus.CANCEL
                return ov.StreamingStatus.RUNNING

            def end(self) -> None:
                tail = detok.flush()
                if tail and result.chunks:
                    last = result.chunks[-1]
                    result.chunks[-1] = Chunk(side, last.token_ids, last.text + tail, last.accepted_text, last.t)

        with self._lock:
            result.start = time.perf_counter()
            on_start(result.start)
            try:
                decoded = self.pipe.generate([templated], self._config(settings), _Streamer())
            except RuntimeError as e:
                result.end = time.perf_counter()
                result.error = _first_line(e)
                return result
            result.end = time.perf_counter()
        pm = decoded.perf_metrics
        result.ov_generated_tokens = int(pm.get_num_generated_tokens())
        result.ov_ttft_ms = float(pm.get_ttft().mean)
        result.ov_tpot_ms = float(pm.get_tpot().mean)
        ext = getattr(decoded, "extended_perf_metrics", None)
        if self.side == SPECULATIVE and ext is not None:
            result.ov_accepted_tokens = int(ext.get_num_accepted_tokens())
            result.ov_draft_tokens = int(ext.get_num_draft_tokens())
        return result


def _first_line(e: BaseException) -> str:
    lines = [l.strip() for l in str(e).splitlines() if l.strip()]
    # OpenVINO errors start with "Exception from src/...cpp:123:"; the useful part follows.
    useful = [l for l in lines if not l.startswith("Exception from") and not l.startswith("Check '")]
    return (useful or lines or [type(e).__name__])[0][:300]


@dataclass(frozen=True)
class PairKey:
    main: str
    draft: Optional[str]
    method: str
    options: PipelineOptions


class PipelineCache:
    """Builds baseline + speculative runners lazily and keeps the last few pairs.

    Pairs differ by model paths, devices, exact mode and thread split; each pair holds the
    main model twice (OpenVINO memory-maps the same weights file, so much of it is shared).
    """

    def __init__(self, max_pairs: int = 2):
        self.max_pairs = max_pairs
        self._pairs: "OrderedDict[PairKey, dict[str, OpenVINORunner]]" = OrderedDict()
        self._lock = threading.Lock()

    def get(
        self,
        main: Path,
        draft: Optional[Path],
        method: str,
        options: PipelineOptions,
        status: Callable[[str], None] = lambda msg: None,
    ) -> dict[str, OpenVINORunner]:
        if method == "draft" and draft is None:
            raise DemoError("This preset has no draft model; choose prompt lookup as the speculative method.")
        key = PairKey(str(main), str(draft) if method == "draft" else None, method, options)
        with self._lock:
            if key in self._pairs:
                self._pairs.move_to_end(key)
                return self._pairs[key]
            while len(self._pairs) >= self.max_pairs:
                self._pairs.popitem(last=False)  # drop the least recently used pair first
            pair = build_pair(key, status)
            self._pairs[key] = pair
            return pair


def build_pair(key: PairKey, status: Callable[[str], None]) -> dict[str, OpenVINORunner]:
    import openvino_genai as ov

    o = key.options
    check_device(o.main_device, "main")
    if key.method == "draft":
        check_device(o.draft_device, "draft")
    props = _properties(o)
    scheduler = ov.SchedulerConfig()
    scheduler.cache_size = o.cache_size_gb
    try:
        status("loading the baseline pipeline (main model)")
        baseline = ov.LLMPipeline(key.main, o.main_device, **props)
        status("loading the speculative pipeline (main + draft)")
        if key.method == "draft":
            draft = ov.draft_model(key.draft, o.draft_device, **props)
            speculative = ov.LLMPipeline(key.main, o.main_device, draft_model=draft, scheduler_config=scheduler, **props)
        else:
            speculative = ov.LLMPipeline(key.main, o.main_device, prompt_lookup=True, scheduler_config=scheduler, **props)
    except RuntimeError as e:
        msg = _first_line(e)
        if "Tokenizers for draft and main models are different" in str(e):
            raise DemoError("The draft model's tokenizer differs from the main model's; pick a draft from the same family.") from None
        raise DemoError(f"OpenVINO could not load the models ({msg}); check the model folders and devices.") from None
    status("warming up both pipelines")
    return {BASELINE: OpenVINORunner(BASELINE, baseline), SPECULATIVE: OpenVINORunner(SPECULATIVE, speculative)}
