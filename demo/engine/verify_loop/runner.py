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
from ...models.code_datastore import Datastore
from .datastore import DatastoreProposer
from .gate import Gate
from .loop import Sampler, Step, VerifyLoop
from .main_model import StatefulMain
from .ngram import NgramProposer
from .recycled import RecycledProposer

# The widest verify the gate may choose: the last token and up to 7 guesses. Wider verifies
# cost more than one token on every CPU measured, and free guesses rarely hold that long.
MAX_WIDTH = 8
# Each width's steady cost is timed this many times at load (after one infer that changes the
# width, timed as the switch); the gate then follows the real steps.
COST_REPEATS = 3
COST_PREFIX_TOKENS = 100


def default_proposers(datastore: Optional[Datastore] = None) -> list:
    """Fresh drafters for one answer: the prompt and answer, the datastore where one is built,
    the main model's recycled predictions (the gate picks among their proposals every step)."""
    proposers: list = [NgramProposer()]
    if datastore is not None:
        proposers.append(DatastoreProposer(datastore))
    proposers.append(RecycledProposer())
    return proposers


def time_widths(main: StatefulMain, widths: int = MAX_WIDTH, repeats: int = COST_REPEATS,
                prefix: int = COST_PREFIX_TOKENS) -> Gate:
    """A gate with this machine's costs: the median seconds of a steady infer over m = 1 … widths
    new tokens after a `prefix`-token prompt (m after m), and what a change of m adds (the first
    infer after a change, over the steady one). An untimed pass first builds every width's
    kernels; the widths then run in alternating order, so a drifting machine shifts all alike."""
    steady: list[list[float]] = [[] for _ in range(widths)]
    first: list[list[float]] = [[] for _ in range(widths)]
    ids = [(7 * i) % 1000 + 10 for i in range(prefix)]
    main.prefill(ids)
    order = list(range(1, widths + 1))
    for rnd in range(3):  # an untimed pass, then two timed ones in opposite orders
        for m in (order if rnd % 2 else order[::-1]):
            for i in range(repeats + 1):
                t0 = time.perf_counter()
                main.verify(ids[:m])
                seconds = time.perf_counter() - t0
                main.keep(0)
                if rnd:
                    (first if i == 0 else steady)[m - 1].append(seconds)
    main.reset()
    costs = [sorted(s)[len(s) // 2] for s in steady]
    switch = sorted(f[0] - c for f, c in zip(first, costs))[widths // 2]
    return Gate(costs, max(0.0, switch))


class OwnLoopRunner:
    """The speculative side of a race on the arena's own verify loop (free drafting)."""

    def __init__(self, folder: Path, properties: dict, side: str = SPECULATIVE, device: str = "CPU",
                 max_context: Optional[int] = None, datastore=None, costs: Optional[Sequence[float]] = None,
                 switch_s: float = 0.0,
                 warmup: bool = True):
        import openvino_genai

        self.side = side
        self.folder = Path(folder)
        self.tokenizer = openvino_genai.Tokenizer(str(self.folder))
        self.main = StatefulMain(self.folder, properties, device)
        self.max_context = max_context
        self.datastore = datastore
        self.gate = Gate(list(costs), switch_s) if costs else time_widths(self.main)
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
        # K (the number of assistant tokens) is the most guesses one step may verify; the gate
        # chooses how many, step by step, from 0 up to it.
        widths = 1 + min(settings.assistant_tokens or MAX_WIDTH - 1, len(self.gate.costs) - 1)
        gate = self.gate.carried()
        gate.costs = gate.costs[:widths]
        loop = VerifyLoop(self.main, default_proposers(self.datastore), gate, self.eos_ids)
        sampler = Sampler(settings.temperature if settings.sampling else None, settings.top_p, settings.seed)
        detok = IncrementalDetokenizer(self.tokenizer.decode)
        result = RunResult(self.side, start=0.0, end=0.0)

        def on_step(step: Step) -> bool:
            # The end token is streamed too (its text is empty), as OpenVINO GenAI's pipelines do,
            # so both sides count the same tokens.
            accepted_text, last_text = detok.feed(step.tokens)
            chunk = Chunk(self.side, step.tokens, accepted_text + last_text, accepted_text, step.t)
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
                # The next answer starts from the costs this one measured and what it learned.
                self.gate = Gate(loop.gate.costs + self.gate.costs[widths:], loop.gate.switch_s, loop.gate.margin,
                                 loop.gate.accepted, loop.gate.tried)
            result.end = time.perf_counter()
        tail = detok.flush()
        if tail and result.chunks:
            c = result.chunks[-1]
            result.chunks[-1] = Chunk(c.side, c.token_ids, c.text + tail, c.accepted_text, c.t)
        self.last_steps = steps
        _own_counts(result, steps)
        return result

    @property
    def costs(self) -> list[float]:
        """Seconds of one verify over 1, 2, … new tokens, as this runner last measured them."""
        return list(self.gate.costs)

    def close(self) -> None:
        self.main.close()


def load_own_loop(main: Path, options, max_context: Optional[int], warmup: bool = True) -> OwnLoopRunner:
    """The runner for `main` compiled with the CPU properties a plain pipeline with `options` gets
    (demo.core.placement), the datastore built for its tokenizer if any; load failures in one sentence."""
    from ...core.placement import properties_for
    from ...models import code_datastore

    try:
        return OwnLoopRunner(main, properties_for(options.main_device, options), device=options.main_device,
                             max_context=max_context, datastore=code_datastore.built_beside(main), warmup=warmup)
    except MemoryError:
        raise DemoError("There was not enough memory to load the main model; choose a smaller preset or weight "
                        "format.") from None
    except RuntimeError as e:
        raise DemoError(f"OpenVINO could not load the main model for free drafting ({first_line(e)}); check the "
                        "model folder.") from None


def _own_counts(result: RunResult, steps: Sequence[Step]) -> None:
    """The counts OpenVINO's pipelines report, from the loop's own steps (generated tokens
    include an end token, as GenAI counts them), and its guesses by drafter. Guesses that only
    pad a step to the width the gate holds count as drafted (the main model checked them)."""
    result.ov_generated_tokens = sum(len(s.tokens) for s in steps)
    result.ov_accepted_tokens = sum(s.accepted for s in steps[1:])
    result.ov_draft_tokens = sum(len(s.proposed) for s in steps)
    result.ov_main_calls = len(steps)
    result.ov_main_infer_ms = 1000 * sum(s.infer_s for s in steps) / max(1, len(steps))
    result.ov_step_tokens = [len(s.tokens) for s in steps]
    result.ov_main_step_ms = [1000 * s.infer_s for s in steps]
    result.ov_step_ms = result.ov_main_step_ms
    sources: dict = {}
    for s in steps:
        if s.source is not None:
            row = sources.setdefault(s.source, [0, 0, 0])
            verified = len(s.proposed) - s.padded
            row[0] += 1
            row[1] += verified
            row[2] += min(s.accepted, verified)
    result.guess_sources = sources
    result.guess_steps = [[list(s.proposed), s.source, s.padded] for s in steps]


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
