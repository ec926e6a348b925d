"""One loaded OpenVINO GenAI pipeline as a race's runner: the chat template, the checks
that a prompt fits, streaming its steps to a RunResult, and OpenVINO's own counts.
Which pipelines are built, and which stay loaded, is pipelines.py's.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional

from ..core import placement
from ..core.errors import DemoError, unexpected, without_paths
from ..core.settings import JOB_TOKEN_BUDGET, MAX_PROMPT_TOKENS, GenerationSettings, PipelineOptions
from ..core.streaming import SPECULATIVE, Chunk, IncrementalDetokenizer, RunResult
from . import kv_capacity

OnChunk = Callable[[Chunk], bool]  # return False to stop generating


class _Streamer:
    """Feeds one run's steps to its RunResult; built per run from plain callbacks.

    A module-level class (not one defined inside run()) so that a finished run leaves no
    class object behind that keeps the pipeline alive until the next full garbage
    collection: an evicted pair must free its memory at once.
    """

    @staticmethod
    def make(ov, side: str, detok: IncrementalDetokenizer, result: RunResult, on_chunk: OnChunk):
        class Streamer(ov.StreamerBase):
            def write(self, token):
                now = time.perf_counter()
                try:
                    ids = tuple(token) if isinstance(token, list) else (token,)
                    accepted_text, last_text = detok.feed(ids)
                    chunk = Chunk(side, ids, accepted_text + last_text,
                                  accepted_text if side == SPECULATIVE else "", now)
                    result.chunks.append(chunk)
                    keep_going = on_chunk(chunk)
                except Exception as e:
                    # An exception must not cross into OpenVINO's C++ (pybind11 would abort the
                    # whole process): record it and stop this side.
                    result.error = unexpected(f"streaming the {side} side", e)
                    return ov.StreamingStatus.CANCEL
                if not keep_going:
                    result.cancelled = True
                    return ov.StreamingStatus.CANCEL
                return ov.StreamingStatus.RUNNING

            def end(self):
                try:
                    tail = detok.flush()
                except Exception as e:
                    result.error = result.error or unexpected(f"ending the {side} side's stream", e)
                    return
                if tail and result.chunks:
                    last = result.chunks[-1]
                    result.chunks[-1] = Chunk(side, last.token_ids, last.text + tail, last.accepted_text, last.t)

        return Streamer()


def template(tokenizer, prompt) -> str:
    """Apply the model's chat template when it has one (instruct models do). `prompt` is the
    race's text or a chat's messages ([{"role", "content"}], demo.engine.chat)."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    if not tokenizer.chat_template:  # a base model: the conversation as plain lines
        return prompt if isinstance(prompt, str) else plain_transcript(messages)
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True)


def plain_transcript(messages: list) -> str:
    return "".join(f"{m['role'].capitalize()}: {m['content']}\n" for m in messages) + "Assistant:"


def count_tokens(tokenizer, text: str) -> int:
    return int(tokenizer.encode(text).input_ids.get_shape()[-1])


def check_fits(side: str, n_prompt: int, settings: GenerationSettings, max_context: Optional[int],
               max_prompt: Optional[int] = None, kv_tokens: Optional[int] = None) -> None:
    """Refuse a prompt of `n_prompt` tokens that is too much work with the new tokens (one job's
    budget, JOB_TOKEN_BUDGET), that this side's model cannot hold with them, that its device cannot take (`max_prompt`: the NPU's compiled prompt length), or
    that its KV-cache pools cannot hold (`kv_tokens`: kv_capacity.side_capacity)."""
    if n_prompt > MAX_PROMPT_TOKENS:
        raise DemoError(
            f"The prompt is {n_prompt} tokens long; this demo accepts at most {MAX_PROMPT_TOKENS}, so shorten it."
        )
    if n_prompt * settings.max_new_tokens > JOB_TOKEN_BUDGET:
        raise DemoError(
            f"A {n_prompt}-token prompt with {settings.max_new_tokens} new tokens is more work than one run may take "
            f"here (prompt tokens × new tokens at most {JOB_TOKEN_BUDGET:,}); shorten the prompt or lower max new tokens."
        )
    if max_prompt is not None and n_prompt > max_prompt:
        raise DemoError(f"The prompt is {n_prompt} tokens long and the NPU takes at most {max_prompt}; "
                        "shorten it or choose another device.")
    # A speculative step may write K draft tokens past the last one it keeps.
    slack = (settings.assistant_tokens or 0) if side == SPECULATIVE else 0
    if max_context is not None and n_prompt + settings.max_new_tokens + slack > max_context:
        raise DemoError(
            f"The prompt ({n_prompt} tokens) plus {settings.max_new_tokens} new tokens does not fit in the "
            f"{max_context} tokens this model can hold; shorten the prompt or lower max new tokens."
        )
    if kv_tokens is not None and kv_capacity.tokens_needed(n_prompt + settings.max_new_tokens + slack) > kv_tokens:
        raise DemoError(
            f"The prompt ({n_prompt} tokens) plus {settings.max_new_tokens} new tokens needs more KV cache than the "
            f"{side} pipeline's pool holds: at most {max(0, kv_tokens - slack):,} tokens in all fit for this model "
            "with these settings, so shorten the prompt or lower max new tokens."
        )


def generation_config(ov, side: str, s: GenerationSettings):
    """The GenerationConfig one side runs `s` with (`ov`: the openvino_genai module)."""
    c = ov.GenerationConfig()
    c.max_new_tokens = s.max_new_tokens
    c.apply_chat_template = False  # applied by template(), identically for both sides
    if s.sampling:
        c.do_sample = True
        c.temperature = s.temperature
        c.top_p = s.top_p
        c.rng_seed = s.seed
    if side == SPECULATIVE:
        if s.confidence_threshold is not None:
            c.assistant_confidence_threshold = s.confidence_threshold
        else:
            c.num_assistant_tokens = s.assistant_tokens
        if s.method == "prompt_lookup":
            c.max_ngram_size = s.max_ngram_size
        if s.tree:  # EAGLE-3 tree drafting (GenerationSettings checked the numbers)
            c.branching_factor = s.branching_factor
            c.tree_depth = s.tree_depth
    return c


class OpenVINORunner:
    """One side of the race: an LLMPipeline plus what it takes to stream it."""

    def __init__(self, side: str, pipe, warmup: bool = True, max_context: Optional[int] = None,
                 method: str = "draft", max_prompt: Optional[int] = None, kv_tokens: Optional[int] = None):
        import openvino_genai

        self._ov = openvino_genai
        self.side = side
        self.pipe = pipe
        self.tokenizer = pipe.get_tokenizer()
        self.max_context = max_context  # prompt + new tokens this pipeline can hold (None: unknown)
        self.max_prompt = max_prompt    # prompt tokens its device takes (None: no limit of its own)
        self.kv_tokens = kv_tokens      # tokens its KV-cache pools hold (None: no pool, or unknown)
        self._lock = threading.Lock()  # one generate() at a time per pipeline
        if warmup:
            # The first generate() after load compiles kernels (seconds): pay that now, not in
            # the first run a visitor watches. A pipeline that cannot even do this is broken:
            # fail the load instead of caching it.
            result = self.run("Hi", GenerationSettings(max_new_tokens=4, method=method), lambda c: True)
            if result.error:
                raise DemoError(f"The {side} pipeline loaded but failed its warm-up run ({result.error}); "
                                "check the model folder and device.")

    def template(self, prompt: str) -> str:
        return template(self.tokenizer, prompt)

    def count_tokens(self, text: str) -> int:
        return count_tokens(self.tokenizer, text)

    def _config(self, s: GenerationSettings):
        return generation_config(self._ov, self.side, s)

    def check_prompt(self, prompt: str, settings: GenerationSettings) -> None:
        """Refuse a prompt that does not fit before either side starts (run() checks again)."""
        check_fits(self.side, self.count_tokens(self.template(prompt)), settings, self.max_context, self.max_prompt,
                   self.kv_tokens)

    def run(self, prompt: str, settings: GenerationSettings, on_chunk: OnChunk,
            on_start: Callable[[float], None] = lambda t: None, stop: Optional[threading.Event] = None) -> RunResult:
        """`stop` is seen through on_chunk only: in this process a prefill runs to its first token."""
        detok = IncrementalDetokenizer(self.tokenizer.decode)
        templated = self.template(prompt)
        check_fits(self.side, self.count_tokens(templated), settings, self.max_context, self.max_prompt, self.kv_tokens)
        result = RunResult(self.side, start=0.0, end=0.0)
        streamer = _Streamer.make(self._ov, self.side, detok, result, on_chunk)
        config = self._config(settings)
        with self._lock:
            result.start = time.perf_counter()
            on_start(result.start)
            try:
                decoded = self.pipe.generate([templated], config, streamer)
            except RuntimeError as e:
                result.end = time.perf_counter()
                result.error = first_line(e)
                return result
            result.end = time.perf_counter()
        pm = decoded.perf_metrics
        result.ov_generated_tokens = int(pm.get_num_generated_tokens())
        result.ov_ttft_ms = float(pm.get_ttft().mean)
        result.ov_tpot_ms = float(pm.get_tpot().mean)
        result.ov_main_infer_ms = float(pm.get_inference_duration().mean)
        result.ov_main_calls = len(pm.raw_metrics.m_batch_sizes) or None
        # Per step that produced tokens (raw lists are in microseconds): the plain pipeline times
        # its ContinuousBatchingImpl::step(), a speculative one its whole step (draft + main).
        result.ov_step_tokens = [int(n) for n in pm.raw_metrics.m_batch_sizes]
        result.ov_step_ms = _ms(pm.raw_metrics.token_infer_durations)
        result.ov_main_step_ms = result.ov_step_ms if self.side != SPECULATIVE else None
        ext = getattr(decoded, "extended_perf_metrics", None)
        if self.side == SPECULATIVE and ext is not None:
            result.ov_accepted_tokens = int(ext.get_num_accepted_tokens())
            result.ov_draft_tokens = int(ext.get_num_draft_tokens())
            main, draft = ext.main_model_metrics, ext.draft_model_metrics
            result.ov_main_infer_ms = float(main.get_inference_duration().mean)
            result.ov_main_calls = len(main.raw_metrics.m_batch_sizes) or None
            # The main model's ContinuousBatchingImpl::step() in each speculative step: the same
            # function, timed the same way, as the baseline's steps above.
            result.ov_main_step_ms = _ms(main.raw_metrics.m_durations)
            result.ov_draft_infer_ms = float(draft.get_inference_duration().mean)
        return result


def _ms(microseconds) -> Optional[list[float]]:
    """A raw per-step list in ms; None when OpenVINO left it empty or all zero (prompt lookup's
    step timer is read before it stops, so it reports 0 for every step)."""
    out = [float(x) / 1000 for x in microseconds]
    return out if any(out) else None


def first_line(e: BaseException) -> str:
    lines = [l.strip() for l in str(e).splitlines() if l.strip()]
    # OpenVINO errors start with "Exception from src/...cpp:123:"; the useful part follows.
    useful = [l for l in lines if not l.startswith("Exception from") and not l.startswith("Check '")]
    return without_paths((useful or lines or [type(e).__name__])[0])[:300]  # no folder of this machine on the page


def scheduler_config(options: PipelineOptions):
    """The one SchedulerConfig every pipeline of a comparison is built with (placement.SchedulerSettings)."""
    import openvino_genai as ov

    wanted = placement.scheduler_settings(options)
    config = ov.SchedulerConfig()
    config.cache_size = wanted.cache_size_gb
    config.max_num_batched_tokens = wanted.max_num_batched_tokens
    config.dynamic_split_fuse = wanted.dynamic_split_fuse
    config.enable_prefix_caching = wanted.enable_prefix_caching
    return config
