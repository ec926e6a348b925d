"""The own verify loop as a race's speculative side: the engine's Runner over VerifyLoop.

It streams one Chunk per main-model step, as GenAI's speculative pipelines do (accepted
guesses, then the main model's own token), and records where each step's guesses came from
(`steps`: the step view and the summary read them)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from ...core.errors import DemoError
from ...core.settings import GenerationSettings
from ...core.streaming import SPECULATIVE, Chunk, IncrementalDetokenizer, RunResult
from ..openvino_runner import check_fits, count_tokens, first_line, template
from .gate import Gate
from .loop import Sampler, Step, VerifyLoop
from .main_model import StatefulMain
from .ngram import NgramProposer
from .recycled import RecycledProposer

# The widest verify the gate may choose: the last token and up to 7 guesses. Wider verifies
# cost more than one token on every CPU measured, and free guesses rarely hold that long.
MAX_WIDTH = 8
# Each width's cost is timed this many times at load; the gate then follows the real steps.
COST_REPEATS = 3
COST_PREFIX_TOKENS = 100


def default_proposers(datastore=None) -> list:
    """The drafters, most specific first: the prompt and answer, the datastore, recycled."""
    proposers: list = [NgramProposer()]
    if datastore is not None:
        proposers.append(datastore)
    proposers.append(RecycledProposer())
    return proposers


def time_widths(main: StatefulMain, widths: int = MAX_WIDTH, repeats: int = COST_REPEATS,
                prefix: int = COST_PREFIX_TOKENS) -> list[float]:
    """Median seconds of one verify over m = 1 … widths new tokens after a `prefix`-token prompt,
    widths interleaved so a drifting machine shifts them all alike."""
    samples: list[list[float]] = [[] for _ in range(widths)]
    ids = [(7 * i) % 1000 + 10 for i in range(prefix)]
    main.prefill(ids)
    for _ in range(repeats):
        for m in range(1, widths + 1):
            t0 = time.perf_counter()
            main.verify(ids[:m])
            samples[m - 1].append(time.perf_counter() - t0)
            main.keep(0)
    main.reset()
    return [sorted(s)[len(s) // 2] for s in samples]


class OwnLoopRunner:
    """The speculative side of a race on the arena's own verify loop (free drafting)."""

    def __init__(self, folder: Path, properties: dict, side: str = SPECULATIVE,
                 max_context: Optional[int] = None, datastore=None, costs: Optional[Sequence[float]] = None,
                 warmup: bool = True):
        import openvino_genai

        self.side = side
        self.folder = Path(folder)
        self.tokenizer = openvino_genai.Tokenizer(str(self.folder))
        self.main = StatefulMain(self.folder, properties)
        self.max_context = max_context
        self.datastore = datastore
        self.costs = list(costs) if costs else time_widths(self.main)
        self.eos_ids = _eos_ids(self.tokenizer, self.folder)
        self.last_steps: list[Step] = []
        self._lock = threading.Lock()
        if warmup:
            result = self.run("Hi", GenerationSettings(max_new_tokens=4), lambda c: True)
            if result.error:
                raise DemoError(f"The own verify loop loaded but failed its warm-up run ({result.error}); "
                                "check the model folder.")

    def template(self, prompt) -> str:
        return template(self.tokenizer, prompt)

    def count_tokens(self, text: str) -> int:
        return count_tokens(self.tokenizer, text)

    def check_prompt(self, prompt: str, settings: GenerationSettings) -> None:
        check_fits(self.side, self.count_tokens(self.template(prompt)), settings, self.max_context)

    def run(self, prompt, settings: GenerationSettings, on_chunk: Callable[[Chunk], bool],
            on_start: Callable[[float], None] = lambda t: None, stop: Optional[threading.Event] = None) -> RunResult:
        ids = [int(t) for t in self.tokenizer.encode(self.template(prompt)).input_ids.data[0]]
        check_fits(self.side, len(ids), settings, self.max_context)
        loop = VerifyLoop(self.main, default_proposers(self.datastore), Gate(list(self.costs)), self.eos_ids)
        sampler = Sampler(settings.temperature if settings.sampling else None, settings.top_p, settings.seed)
        detok = IncrementalDetokenizer(self.tokenizer.decode)
        result = RunResult(self.side, start=0.0, end=0.0)

        def on_step(step: Step) -> bool:
            shown = step.tokens if step.tokens[-1] not in self.eos_ids else step.tokens[:-1]
            if not shown:
                return True
            accepted_text, last_text = detok.feed(shown)
            chunk = Chunk(self.side, shown, accepted_text + last_text, accepted_text, step.t)
            result.chunks.append(chunk)
            if not on_chunk(chunk) or (stop is not None and stop.is_set()):
                result.cancelled = True
                return False
            return True

        with self._lock:
            result.start = time.perf_counter()
            on_start(result.start)
            try:
                steps = loop.generate(ids, settings.max_new_tokens, sampler, on_step)
            except RuntimeError as e:
                result.end = time.perf_counter()
                result.error = first_line(e)
                return result
            finally:
                self.costs = list(loop.gate.costs)  # the next run starts from what this one measured
            result.end = time.perf_counter()
        tail = detok.flush()
        if tail and result.chunks:
            c = result.chunks[-1]
            result.chunks[-1] = Chunk(c.side, c.token_ids, c.text + tail, c.accepted_text, c.t)
        self.last_steps = steps
        _own_counts(result, steps)
        return result

    def close(self) -> None:
        self.main.close()


def _own_counts(result: RunResult, steps: Sequence[Step]) -> None:
    """The counts OpenVINO's pipelines report, from the loop's own steps (generated tokens
    include an end token, as GenAI counts them)."""
    result.ov_generated_tokens = sum(len(s.tokens) for s in steps)
    result.ov_accepted_tokens = sum(s.accepted for s in steps[1:])
    result.ov_draft_tokens = sum(len(s.proposed) for s in steps)
    result.ov_main_calls = len(steps)
    result.ov_main_infer_ms = 1000 * sum(s.infer_s for s in steps) / max(1, len(steps))
    result.ov_step_tokens = [len(s.tokens) for s in steps]
    result.ov_main_step_ms = [1000 * s.infer_s for s in steps]
    result.ov_step_ms = result.ov_main_step_ms


def _eos_ids(tokenizer, folder: Path) -> set[int]:
    """The end tokens: the tokenizer's, plus generation_config.json's (an instruct model's <|im_end|>)."""
    import json

    ids = {int(tokenizer.get_eos_token_id())} if tokenizer.get_eos_token_id() >= 0 else set()
    config = folder / "generation_config.json"
    if config.is_file():
        try:
            eos = json.loads(config.read_text()).get("eos_token_id")
        except (OSError, ValueError):
            eos = None
        ids |= {int(e) for e in (eos if isinstance(eos, list) else [eos]) if isinstance(e, int)}
    return ids
