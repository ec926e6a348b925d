"""Step by step: what the draft proposed at each main-model step of a finished greedy race.

OpenVINO GenAI reports only counts of accepted guesses, not the guesses themselves. With
greedy decoding the draft is deterministic, so its proposal at each step is its greedy
continuation of the text so far (the prompt and every token the run produced before that
step), K tokens: we run the draft alone after the race, keeping its KV cache from step to
step (trimmed back to the tokens that survived), and compare. The run itself is the truth:
a step kept exactly (its size - 1) guesses, so a reconstruction whose agreement with the
run's tokens says otherwise is marked as differing (other kernels, other rounding: the
pipeline's draft runs paged attention, this one the stateful model) and counted.

Runs inside the admission slot, bounded in time, and stops when asked.
"""

from __future__ import annotations

import atexit
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

from ..core import placement
from ..core.acceptance import StepCosts
from ..core.errors import DemoError
from ..core.settings import FREE_DRAFT, GenerationSettings, PipelineOptions

MAX_SECONDS = 60.0  # a reconstruction that takes longer shows the steps it reached


@dataclass(frozen=True)
class StepGuesses:
    """One verify step: the draft's K guesses and what the run did with them."""

    index: int                    # 1-based, among the verify steps (the prompt's step is not one)
    proposed: tuple[int, ...]     # the draft's guesses, reconstructed
    tokens: tuple[int, ...]       # what the run streamed in this step
    agreed: int                   # leading guesses equal to the run's tokens
    last: bool                    # the run's last step: it may have been cut after its guesses
    source: Optional[str] = None  # the own verify loop: the drafter that guessed (None: a plain step)

    @property
    def kept(self) -> int:
        """Guesses the run kept: all the step's tokens but the main model's own one."""
        return len(self.tokens) - 1

    @property
    def matches(self) -> bool:
        """Whether the reconstruction tells the run's story: it agrees with exactly the kept
        guesses (a last step, possibly cut, only needs to agree with those it kept)."""
        return self.agreed >= self.kept if self.last else self.agreed == self.kept


@dataclass(frozen=True)
class StepReport:
    steps: tuple[StepGuesses, ...]
    texts: dict                   # token id -> its text, for every token shown
    complete: bool                # False: stopped or out of time after `len(steps)` steps
    seconds: float
    recorded: bool = False        # True: the run's own record of its guesses (the own loop), not rebuilt

    @property
    def differ(self) -> int:
        return sum(not s.matches for s in self.steps)


def check_steps(chunk_ids: Sequence[Sequence[int]], proposals: Sequence[Sequence[int]]) -> list[StepGuesses]:
    """Pair each verify step's tokens (the run's chunks after the prompt's) with the draft's
    proposal for it. Pure, so a planted wrong proposal can be checked without a model."""
    out = []
    for j, (tokens, proposed) in enumerate(zip(chunk_ids, proposals)):
        agreed = 0
        while agreed < min(len(proposed), len(tokens)) and proposed[agreed] == tokens[agreed]:
            agreed += 1
        out.append(StepGuesses(j + 1, tuple(proposed), tuple(tokens), agreed, last=j == len(chunk_ids) - 1))
    return out


class DraftProposer:
    """The draft's compiled stateful model, proposing greedy continuations; its KV cache is
    kept between calls and trimmed back to the longest prefix the next context shares."""

    def __init__(self, folder: Path, options: PipelineOptions):
        import openvino as ov

        self._ov = ov
        device = options.draft_device
        props = placement.properties_for(device, options)
        self.request = ov.Core().compile_model(str(Path(folder) / "openvino_model.xml"), device, props) \
            .create_infer_request()
        self._fed: list[int] = []
        self._axis = self._sequence_axis()

    def _feed(self, ids: Sequence[int]):
        from .stateful import step_inputs

        out = self.request.infer(step_inputs([list(ids)], len(self._fed)))
        self._fed.extend(ids)
        return out["logits"][0, -1]

    def _sequence_axis(self) -> Optional[int]:
        """Which axis of the KV state grows with the tokens (None: cannot trim, re-feed instead)."""
        try:
            self.request.reset_state()
            self._fed = []
            self._feed([0])
            one = [tuple(s.state.shape) for s in self.request.query_state()]
            self._feed([0])
            two = [tuple(s.state.shape) for s in self.request.query_state()]
            axes = {i for a, b in zip(one, two) for i, (x, y) in enumerate(zip(a, b)) if y == x + 1}
            return axes.pop() if one and len(axes) == 1 else None
        except Exception:  # a device or state layout we cannot read: re-feed, slower but right
            return None
        finally:
            self.request.reset_state()
            self._fed = []

    def _keep(self, n: int) -> None:
        """Keep the first n tokens of the KV cache."""
        if n == len(self._fed):
            return
        if n == 0 or self._axis is None:
            self.request.reset_state()
            self._fed = []
            return
        for s in self.request.query_state():
            data = s.state.data
            index = [slice(None)] * data.ndim
            index[self._axis] = slice(0, n)
            s.state = self._ov.Tensor(data[tuple(index)].copy())
        del self._fed[n:]

    def propose(self, context: Sequence[int], k: int) -> tuple[int, ...]:
        common = 0
        limit = min(len(self._fed), len(context) - 1)  # at least one token is fed for fresh logits
        while common < limit and self._fed[common] == context[common]:
            common += 1
        self._keep(common)
        logits = self._feed(list(context[len(self._fed):]))
        out = []
        for i in range(k):
            out.append(int(logits.argmax()))
            if i < k - 1:
                logits = self._feed([out[-1]])
        return tuple(out)


_cached: dict = {}  # one proposer (the last pair's draft): a race after a race compiles nothing
_cached_lock = threading.Lock()
_closing = threading.Event()  # the interpreter is exiting: a reconstruction stops at its next step
_busy = threading.Semaphore(1)  # held by the (one) reconstruction running, in its admission turn


@atexit.register
def _at_exit() -> None:
    # A reconstruction left in a daemon thread (its page closed mid-way) must not be inside
    # OpenVINO while the interpreter tears down: that aborts the process.
    _closing.set()
    if _busy.acquire(timeout=10):
        with _cached_lock:
            _cached.clear()


def proposer(folder: Path, options: PipelineOptions) -> DraftProposer:
    key = (str(folder), options)
    with _cached_lock:
        if key not in _cached:
            _cached.clear()
            _cached[key] = DraftProposer(folder, options)
        return _cached[key]


def why_not(settings: GenerationSettings, options: PipelineOptions) -> Optional[str]:
    """The sentence the step view shows instead of steps, or None when it can show them."""
    if settings.method == FREE_DRAFT:  # the loop records its own guesses, sampled or greedy
        return None
    if settings.sampling:
        return ("The step view needs greedy decoding: a sampled draft's guesses cannot be reconstructed "
                "after the race. Turn sampling off and run again.")
    if settings.method == "prompt_lookup":
        return ("With prompt lookup the guesses are copied from the prompt and the answer so far (the tokens "
                "that followed the last matching n-gram), not proposed by a model: blue text in the answer "
                "shows the copies that were kept.")
    if settings.method == "eagle3":
        return ("An EAGLE-3 head drafts from the main model's hidden states inside the pipeline, so its guesses "
                "cannot be replayed on their own after the race: the step view is not shown for it (the chart of "
                "accepted tokens per step is).")
    if not settings.assistant_tokens:
        return "The step view needs a fixed number of assistant tokens; turn the confidence threshold off."
    if placement.kind(options.draft_device) == "NPU":
        return "The step view reconstructs the draft's guesses on the CPU or GPU; it is not shown for a draft on the NPU."
    return None


def reconstruct(folder: Path, options: PipelineOptions, prompt_ids: Sequence[int], chunk_ids: Sequence[Sequence[int]],
                k: int, texts: Callable[[Sequence[int]], dict], stop: Optional[threading.Event] = None,
                max_seconds: float = MAX_SECONDS, clock: Callable[[], float] = time.monotonic,
                progress: Callable[[int, int], None] = lambda done, total: None) -> StepReport:
    """The draft's proposal at each verify step of a run (`chunk_ids`: its chunks' token ids,
    the prompt's step first), checked against the run. `texts(ids)` maps ids to their text."""
    started = clock()
    proposals, complete = [], True
    with _busy:
        draft = proposer(folder, options)
        context = list(prompt_ids) + list(chunk_ids[0] if chunk_ids else ())
        for done, tokens in enumerate(chunk_ids[1:]):
            if (stop is not None and stop.is_set()) or _closing.is_set() or clock() - started > max_seconds:
                complete = False
                break
            progress(done, len(chunk_ids) - 1)
            proposals.append(draft.propose(context, k))
            context.extend(tokens)
    steps = check_steps(chunk_ids[1:], proposals)
    # A step view cut short ends before the run's last step: none of its steps was the last.
    if not complete and steps:
        steps[-1] = StepGuesses(steps[-1].index, steps[-1].proposed, steps[-1].tokens, steps[-1].agreed, last=False)
    shown = {t for s in steps for t in s.proposed + s.tokens}
    return StepReport(steps=tuple(steps), texts=texts(sorted(shown)), complete=complete, seconds=clock() - started)


def recorded(result, texts: Callable[[Sequence[int]], dict]) -> StepReport:
    """The step view of a run of the own verify loop (RunResult.guess_steps): every step's guesses
    as the loop verified them and the drafter that proposed them, checked against the run's tokens
    as a reconstruction is (a record that disagreed with the run would show as differing)."""
    if not result.guess_steps or len(result.guess_steps) != len(result.chunks):
        raise DemoError("This run kept no record of its guesses, so the step view cannot show them.")
    chunk_ids = [c.token_ids for c in result.chunks]
    steps = check_steps(chunk_ids[1:], [guessed for guessed, _, _ in result.guess_steps[1:]])
    steps = [StepGuesses(s.index, s.proposed, s.tokens, s.agreed, s.last, source)
             for s, (_, source, _) in zip(steps, result.guess_steps[1:])]
    shown = {t for s in steps for t in s.proposed + s.tokens}
    return StepReport(steps=tuple(steps), texts=texts(sorted(shown)), complete=True, seconds=0.0, recorded=True)


def for_race(arena, request, result, stop: threading.Event,
             status: Callable[[str], None] = lambda m: None) -> StepReport:
    """The step view of a finished race's speculative side (demo.engine.arena.Arena and
    RaceRequest, its RunResult), in the admission slot like any work on the CPU."""
    import openvino_genai

    from .arena import validate_prompt
    from .openvino_runner import template

    pair = arena.prepared(request)
    if request.settings.method == FREE_DRAFT:  # nothing to rebuild: the loop's own record, decoded
        if pair is None:
            raise DemoError("The step view needs the main model in the page's own process; it is shown by the "
                            "single-machine app (python app.py), not on a cluster.")
        tokenizer = openvino_genai.Tokenizer(str(pair.main))
        return recorded(result, lambda shown: {t: tokenizer.decode([t]) for t in shown})
    if pair is None or pair.draft is None:
        raise DemoError("The step view needs the draft model in the page's own process; it is shown by the "
                        "single-machine app (python app.py), not on a cluster.")
    # Part of the race's job: served before visitors who arrived during the race.
    ticket = arena.admission.follow_up("reconstructing the draft's guesses", stop, status)
    try:
        options = arena.options_for(request).with_threads(None)  # the race's precision: the same guesses
        if placement.kind(options.draft_device) == "CPU":  # compiled in this process: proven in a child first
            from .native_guard import NativeConfig

            arena.guard.require([NativeConfig(str(pair.draft), "draft", None, precision=placement.cpu_precision(options))],
                                status, stop)
        status("reconstructing the draft's guesses, step by step")
        tokenizer = openvino_genai.Tokenizer(str(pair.main))
        # The prompt as the race ran it (a lone surrogate became U+FFFD): arena.validate_prompt.
        ids = tokenizer.encode(template(tokenizer, validate_prompt(request.prompt))).input_ids.data[0].tolist()
        return reconstruct(pair.draft, options, ids,
                           [c.token_ids for c in result.chunks], request.settings.assistant_tokens,
                           lambda shown: {t: tokenizer.decode([t]) for t in shown}, stop,
                           progress=lambda done, total: status(f"reconstructing the draft's guesses: step {done + 1} of {total}"))
    finally:
        ticket.release()


def step_costs_for(arena, request) -> Optional[StepCosts]:
    """This machine's calibrated cost of a speculative step for the request's formats and mode."""
    from ..models.calibration_store import load_cached, step_costs

    pair = arena.prepared(request)
    if pair is None or request.settings.method != "draft":
        return None
    mode = request.mode
    return step_costs(load_cached(arena.store, arena.presets.get(request.preset)), pair.main_format,
                      pair.draft_format, mode)
