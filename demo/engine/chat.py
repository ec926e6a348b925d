"""The chat race: a conversation in which every turn is a race.

Both sides get the same user turns; each keeps its own answers, so each side's prompt is
its own history, chat-templated as the race templates a prompt (openvino_runner.template), plus
the new message. A turn runs through the Arena's front door like a race (its preparing, its
one admission slot, its pipelines, race.race), so Stop, the queue and the limits are the race's.

    conversation = Conversation()
    for event in run(arena, RaceRequest(prompt="Hi", preset=...), conversation, stop):
        ...  # StatusEvent / StartEvent / ChunkEvent / DoneEvent, as Arena.run
    conversation.turns[-1]  # the message, each side's chunks and results so far
    conversation.full()     # None, or the sentence that says the chat is full

A conversation is bounded: MAX_TURNS turns, and each side's templated history within the
race's prompt-token limit (less the new tokens where the model's context is shorter).
Engine code: no Gradio.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import Iterator, Optional

from ..core import metrics, placement
from ..core.errors import DemoError
from ..core.metrics import SideStats, side_stats
from ..core.settings import MAX_PROMPT_TOKENS, METHOD_NAMES, GenerationSettings, PipelineOptions
from ..core.streaming import HEARTBEAT_S, SIDES, SPECULATIVE, ChunkEvent, DoneEvent, Heartbeat, StartEvent
from .arena import RaceRequest, validate_prompt
from .backend import Backend
from .race import race

MAX_TURNS = 8
MAX_CHAT_TOKENS = MAX_PROMPT_TOKENS  # one side's templated conversation, as a race's prompt
MAX_NEW_TOKENS = 256                 # per answer: 8 turns of a visitor's chat stay bounded
MIN_ROOM = 16                        # tokens a next message needs (its text and the template's markers)

_CLAIM = threading.Lock()  # one module lock: a Conversation must stay deep-copyable (gr.State)


@dataclass
class Turn:
    """One user message and what each side answered (as it streams, then its RunResult)."""

    user: str
    chunks: dict = field(default_factory=lambda: {side: [] for side in SIDES})
    results: dict = field(default_factory=dict)  # side -> RunResult once that side is done
    start: dict = field(default_factory=dict)    # side -> perf_counter when its generate() began

    def answer(self, side: str) -> str:
        return "".join(c.text for c in self.chunks[side])

    def record(self, event) -> None:
        if isinstance(event, ChunkEvent):
            self.chunks[event.side].append(event.chunk)
        elif isinstance(event, DoneEvent):
            self.results[event.side] = event.result
            self.start[event.side] = event.result.start
            # The final chunks: the last may have gained a character still incomplete when it streamed.
            self.chunks[event.side] = list(event.result.chunks)
        elif isinstance(event, StartEvent):
            self.start[event.side] = event.t

    def stopped(self) -> bool:
        return len(self.results) < len(SIDES) or any(r.cancelled for r in self.results.values())


@dataclass
class Conversation:
    """A visitor's chat: the preset and speculative method it runs on, its turns, and each side's
    history size."""

    preset: Optional[str] = None
    method: Optional[str] = None                 # the speculative side's method (core.settings.Method)
    turns: list = field(default_factory=list)
    tokens: dict = field(default_factory=dict)  # side -> tokens of its templated history (after the last turn)
    limit: int = MAX_CHAT_TOKENS                 # the token bound that applied to the last turn
    busy: bool = False

    def messages(self, side: str, new: Optional[str] = None) -> list:
        """This side's history as chat messages: every user turn with this side's own answer."""
        out = []
        for turn in self.turns:
            out += [{"role": "user", "content": turn.user}, {"role": "assistant", "content": turn.answer(side)}]
        return out + ([{"role": "user", "content": new}] if new is not None else [])

    def full(self) -> Optional[str]:
        """None while another turn may be sent, else the sentence that says why not."""
        if len(self.turns) >= MAX_TURNS:
            return f"This chat has reached its {MAX_TURNS} turns; press New chat to start another."
        longest = max(self.tokens.values(), default=0)
        if longest + MIN_ROOM > self.limit:
            return (f"This chat is full: its history is {longest:,} tokens and a turn may send at most "
                    f"{self.limit:,}; press New chat to start another.")
        return None

    def check(self, preset: str, method: str) -> None:
        reason = self.full()
        if reason:
            raise DemoError(reason)
        if self.preset is not None and self.turns and preset != self.preset:
            raise DemoError(f"This chat runs on {self.preset!r}; press New chat to talk to another model pair.")
        # One method per conversation: a turn's speed is compared with the turns before it.
        if self.method is not None and self.turns and method != self.method:
            raise DemoError(f"This chat guesses by {METHOD_NAMES[self.method]}; press New chat to use another "
                            "speculative method.")

    def claim(self) -> None:
        with _CLAIM:
            if self.busy:
                raise DemoError("A turn of this chat is still running; wait for it or press Stop.")
            self.busy = True

    def release(self) -> None:
        # A turn stopped before either side wrote a word is not part of the conversation.
        if self.turns and not any(self.turns[-1].answer(side) for side in SIDES):
            self.turns.pop()
        self.busy = False


def token_limit(runner, settings: GenerationSettings) -> int:
    """Tokens one side's templated conversation may have: the race's prompt limit, or less
    where the model cannot hold that plus the new tokens (and a speculative step's K)."""
    limit = MAX_CHAT_TOKENS
    context = getattr(runner, "max_context", None)
    if context is not None:
        slack = (settings.assistant_tokens or 0) if runner.side == SPECULATIVE else 0
        limit = min(limit, context - settings.max_new_tokens - slack)
    return limit


def check_fits(runners: dict, prompts: dict, settings: GenerationSettings, conversation: Conversation) -> None:
    """Refuse a turn whose conversation either side cannot take, with the chat's sentence."""
    limit = min(token_limit(runners[side], settings) for side in SIDES)
    n = max(runners[side].count_tokens(runners[side].template(prompts[side])) for side in SIDES)
    if n > limit:
        if not conversation.turns:
            raise DemoError(f"The message is {n:,} tokens long with the chat template; a turn may send at most "
                            f"{limit:,}, so shorten it.")
        raise DemoError(f"This chat is full: with your message the conversation is {n:,} tokens and a turn may "
                        f"send at most {limit:,}; press New chat to start another.")
    for side in SIDES:
        runners[side].check_prompt(prompts[side], settings)  # the race's own check, as Arena.run makes it


def run(arena: Backend, request: RaceRequest, conversation: Conversation,
        stop: Optional[threading.Event] = None, visitor=(), heartbeats: bool = False) -> Iterator:
    """One turn: the request's prompt is the new user message. Validate, wait for the CPU
    (StatusEvents), then race both sides on their own histories, recording the turn into
    `conversation` as it streams. `visitor`: whose turn it is (Admission.claim: one job per
    visitor, like a race). Closing the iterator stops the turn without waiting; `heartbeats`
    as in Arena.run."""
    text = validate_prompt(request.prompt)
    settings = request.settings.validated()
    placement.check_options(request.options, settings)
    request = replace(request, mode="race")
    name = arena.presets.get(request.preset).name
    conversation.check(name, settings.method)
    with arena.admission.visiting("a chat turn", visitor):
        yield from _turn(arena, request, conversation, stop, text, settings, name, heartbeats)


def _turn(arena: Backend, request: RaceRequest, conversation: Conversation, stop: Optional[threading.Event],
          text: str, settings: GenerationSettings, name: str, heartbeats: bool) -> Iterator:
    conversation.claim()
    stop = stop or threading.Event()
    try:
        prompts = {side: conversation.messages(side, text) for side in SIDES}

        def load(status, pair):
            runners = arena.runners(request, status, cancel=stop)
            check_fits(runners, prompts, settings, conversation)
            return runners

        ticket, runners = yield from arena.admitted(
            "a chat turn", stop,
            lambda status: arena.prepare(request.preset, status, cancel=stop, **arena.formats_for(request)), load)
        conversation.preset, conversation.method = name, settings.method
        turn = Turn(text)
        conversation.turns.append(turn)
        events = None
        try:
            events = race(runners, prompts, settings, stop, on_finished=ticket.release,
                          heartbeat_s=HEARTBEAT_S if heartbeats else None)
            for event in events:
                if not isinstance(event, Heartbeat):  # a heartbeat records nothing
                    turn.record(event)
                yield event
        finally:
            if events is None:
                ticket.release()
            else:
                events.close()  # stops both generate() calls if the consumer left early
        measure(conversation, runners, settings)
    finally:
        conversation.release()


def measure(conversation: Conversation, runners: dict, settings: GenerationSettings) -> None:
    """Each side's history in tokens after a turn, so the page can say when the chat is full."""
    conversation.tokens = {side: runners[side].count_tokens(runners[side].template(conversation.messages(side)))
                           for side in SIDES}
    conversation.limit = min(token_limit(runners[side], settings) for side in SIDES)


# -- the numbers the page shows -----------------------------------------------------------------

@dataclass(frozen=True)
class Totals:
    tokens: int
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def speedup(base: Totals, spec: Totals) -> Optional[float]:
    """The conversation's speedup, by the race's one definition (core.metrics.speedup)."""
    return metrics.speedup(base, spec)


def turn_stats(turn: Turn) -> dict:
    """side -> SideStats of this turn so far (live) or at its end; sides not started are absent."""
    out: dict[str, SideStats] = {}
    for side in SIDES:
        if side in turn.start:
            result = turn.results.get(side)
            out[side] = side_stats(turn.chunks[side], turn.start[side], result.end if result else None)
    return out


def cumulative(conversation: Conversation) -> dict:
    """side -> Totals over every turn both sides ended without an error (stopped ones count:
    their tokens and seconds are real)."""
    totals = {side: Totals(0, 0.0) for side in SIDES}
    for turn in conversation.turns:
        if len(turn.results) < len(SIDES) or any(r.error for r in turn.results.values()):
            continue
        for side, stats in turn_stats(turn).items():
            totals[side] = Totals(totals[side].tokens + stats.tokens, totals[side].seconds + stats.elapsed_s)
    return totals


def kv_reuse(options: PipelineOptions, method: str) -> str:
    """Whether a turn re-uses the KV cache of the conversation before it: the same on both
    sides, since one scheduler config builds both pipelines (pipelines.scheduler_config)."""
    if placement.stateful(options, method):
        return ("Multi-turn KV reuse is off on both sides (stateful pipelines keep no prefix cache): every turn "
                "prefills the whole conversation again.")
    if placement.scheduler_settings(options).enable_prefix_caching:
        return ("Multi-turn KV reuse (prefix caching) is on for both sides: a turn prefills only what is new "
                "since the last.")
    return ("Multi-turn KV reuse (prefix caching) is off for both sides, as for every race: each turn prefills "
            "the whole conversation again, on both sides alike, so the time to the first token grows turn by turn.")

