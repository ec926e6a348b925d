"""One side's continuous-batching pipeline as a race's runner, shared by requests that arrive
together (a Serve replica with several requests in flight): each run() joins the batch
(demo.engine.batching) and streams its own steps, with the same Runner interface as
OpenVINORunner, so run_side and the Serve worker use it unchanged.

Built from the same properties and scheduler settings as the single-request pipelines
(pipelines._load_pipelines), but as an openvino_genai.ContinuousBatchingPipeline, the API
that takes one request at a time with its own handle.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable, Optional

from ..core.errors import DemoError
from ..core.settings import GenerationSettings, uses_draft_model
from ..core.streaming import BASELINE, SPECULATIVE, Chunk, IncrementalDetokenizer, RunResult
from . import kv_capacity
from .batching import BatchedPipeline
from .openvino_runner import check_fits, count_tokens, first_line, generation_config, template


def load_batched(key, side: str, status: Callable[[str], None] = lambda m: None):
    """An openvino_genai.ContinuousBatchingPipeline for one side of `key` (pipelines.PairKey):
    the main model alone (baseline) or with its draft or prompt lookup (speculative)."""
    import openvino_genai as ov

    from ..core import placement
    from .pipelines import check_device, scheduler_config

    o = key.options
    if placement.stateful(o, key.method):
        raise DemoError("Batching many requests needs the continuous-batching backend, which an NPU pair does not "
                        "use; place the models on the CPU or a GPU.")
    check_device(o.main_device, "main")
    props = placement.pipeline_properties(o.main_device, o, key.method)
    if side == SPECULATIVE and uses_draft_model(key.method):
        check_device(o.draft_device, "draft")
        props["draft_model"] = ov.draft_model(key.draft, o.draft_device,
                                              **placement.draft_properties(o.draft_device, o, key.method))
    elif side == SPECULATIVE:
        props["prompt_lookup"] = True
    status(f"loading the {side} pipeline for batched requests")
    try:
        return ov.ContinuousBatchingPipeline(key.main, scheduler_config(o), o.main_device, props)
    except RuntimeError as e:
        if "Tokenizers for draft and main models are different" in str(e):
            raise DemoError("The draft model's tokenizer differs from the main model's; pick a draft from the same "
                            "family.") from None
        raise DemoError(f"OpenVINO could not load the models ({first_line(e)}); check the model folders and "
                        "devices.") from None


def served_note(side: str, drafting: bool, running: int, sharing: int, crossover: Optional[int]) -> str:
    """How a batched request ran, in words, for the race's "how it ran"."""
    batch = (f"batched in its replica with up to {sharing} other request{'s' if sharing != 1 else ''}"
             if sharing else "alone in its replica")
    if side != SPECULATIVE or crossover is None:
        return batch
    if drafting:
        return f"{batch}; drafting ({running} running, below this machine's crossover of {crossover})"
    return (f"{batch}; drafting off: {running} requests were running, at or above this machine's crossover of "
            f"{crossover}, where speculation stops paying")


class BatchedRunner:
    """A Runner over a BatchedPipeline: many run() calls at once share one pipeline."""

    def __init__(self, side: str, pipe, method: str = "draft", crossover: Optional[int] = None,
                 max_context: Optional[int] = None, kv_tokens: Optional[int] = None, warmup: bool = True,
                 plain=None):
        import openvino_genai

        self._ov = openvino_genai
        self.side = side
        self.method = method
        self.tokenizer = pipe.get_tokenizer()
        # `plain`: the main model alone, where requests at or above the crossover go (batching.py says why)
        self.batch = BatchedPipeline(pipe, crossover=crossover if side == SPECULATIVE else None, name=side,
                                     plain=plain if side == SPECULATIVE else None)
        self.max_context = max_context
        self.max_prompt = None
        self.kv_tokens = kv_tokens
        if warmup and self.batch.plain is not None:  # before the driver runs: nothing else steps it
            warm = generation_config(self._ov, BASELINE, GenerationSettings(max_new_tokens=4))
            self.batch.plain.generate(["Hi"], [warm])
        if warmup:  # kernels compile on the first step: pay that at load, not in a visitor's run
            result = self.run("Hi", GenerationSettings(max_new_tokens=4, method=method), lambda c: True)
            if result.error:
                raise DemoError(f"The {side} pipeline loaded but failed its warm-up run ({result.error}); "
                                "check the model folder and device.")

    @property
    def crossover(self) -> Optional[int]:
        """Running requests from which new ones run without drafting (None: never)."""
        return self.batch.crossover if self.batch.plain is not None else None

    def check_prompt(self, prompt: str, settings: GenerationSettings) -> None:
        check_fits(self.side, count_tokens(self.tokenizer, template(self.tokenizer, prompt)), settings,
                   self.max_context, self.max_prompt, self.kv_tokens)

    def run(self, prompt: str, settings: GenerationSettings, on_chunk: Callable[[Chunk], bool],
            on_start: Callable[[float], None] = lambda t: None, stop: Optional[threading.Event] = None) -> RunResult:
        templated = template(self.tokenizer, prompt)
        check_fits(self.side, count_tokens(self.tokenizer, templated), settings, self.max_context, self.max_prompt,
                   self.kv_tokens)
        detok = IncrementalDetokenizer(self.tokenizer.decode)
        result = RunResult(self.side, start=time.perf_counter(), end=0.0)
        on_start(result.start)
        speculative = self.side == SPECULATIVE

        def on_step(ids: tuple, t: float) -> bool:
            accepted_text, last_text = detok.feed(ids)
            chunk = Chunk(self.side, ids, accepted_text + last_text, accepted_text if speculative else "", t)
            result.chunks.append(chunk)
            return on_chunk(chunk)

        config = generation_config(self._ov, self.side, settings)
        plain = generation_config(self._ov, BASELINE, settings) if speculative else None
        request = self.batch.submit(templated, config, on_step, plain_config=plain)
        request.done.wait()
        result.end = request.finished or time.perf_counter()
        tail = detok.flush()
        if tail and result.chunks:
            last = result.chunks[-1]
            result.chunks[-1] = Chunk(self.side, last.token_ids, last.text + tail, last.accepted_text, last.t)
        result.cancelled = request.status == "cancelled"
        if request.status == "failed":
            result.error = request.error or "OpenVINO could not schedule this request"
        result.ov_generated_tokens = request.tokens
        if speculative:  # counted from the steps: each step's tokens are its accepted guesses + 1
            result.ov_accepted_tokens = sum(n - 1 for _, n in request.steps)
        result.served = served_note(self.side, request.drafting, request.running_at_admission, request.sharing,
                                    self.crossover)
        return result


def build_batched_side(key, side: str, status: Callable[[str], None], crossover: Optional[int] = None,
                       warmup: bool = True) -> BatchedRunner:
    """One side as a BatchedRunner (a Serve replica that batches the requests it is sent)."""
    from ..models.folders import max_context

    pipe = load_batched(key, side, status)
    # Stepping aside needs the main model alone beside the speculative pipeline: one more
    # copy of the main model in this replica, loaded only where a crossover is known.
    plain = load_batched(key, BASELINE, status) if side == SPECULATIVE and crossover is not None else None
    if warmup:
        status(f"warming up the {side} pipeline")
    return BatchedRunner(side, pipe, key.method, crossover, max_context=max_context(Path(key.main)),
                         kv_tokens=kv_capacity.side_capacity(key.main, key.draft, side, key.method, key.options),
                         warmup=warmup, plain=plain)
