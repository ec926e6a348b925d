"""The chat race (demo.engine.chat): the conversation model and its bounds with runner doubles,
then a real two-turn chat on the SmolLM2 fixture, checked at the text each pipeline was sent."""

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from demo.core.errors import DemoError
from demo.core.settings import FREE_DRAFT, GenerationSettings, PipelineOptions
from demo.core.streaming import BASELINE, SIDES, SPECULATIVE, Chunk, ChunkEvent, DoneEvent, RunResult
from demo.engine import chat
from demo.engine.arena import Arena, RaceRequest
from demo.engine.openvino_runner import plain_transcript
from demo.models.presets import load_presets

from .conftest import SMOLLM2
from .fakes import FakeRunner

SETTINGS = GenerationSettings(max_new_tokens=8, assistant_tokens=2)


class ChatRunner(FakeRunner):
    """A FakeRunner that also templates and counts like OpenVINORunner and keeps the prompts
    it was sent: words stand for tokens, and its answers name the side and the call."""

    def __init__(self, side, max_context=None, **kw):
        super().__init__(side, [1, 1], delay_s=0, **kw)
        self.max_context = max_context
        self.prompts = []

    def template(self, prompt):
        return plain_transcript(prompt)

    def count_tokens(self, text):
        return len(text.split())

    def check_prompt(self, prompt, settings):
        pass

    def run(self, prompt, settings, on_chunk, on_start=lambda t: None, stop=None):
        self.prompts.append(prompt)
        self.first_token = 100 * (self.calls + 1) + (0 if self.side == BASELINE else 50)
        return super().run(prompt, settings, on_chunk, on_start)


def fake_arena(presets, runners):
    arena = Arena(presets, store=SimpleNamespace(cache_dir=Path("/nonexistent")))
    arena.prepare = lambda *a, **k: SimpleNamespace(main=Path("/m"), draft=Path("/d"), baseline=None)
    arena.runners = lambda request, status=lambda m: None, cancel=None: runners
    return arena


def request(text, preset=SMOLLM2, settings=SETTINGS):
    return RaceRequest(prompt=text, preset=preset, settings=settings)


@pytest.fixture
def runners():
    return {side: ChatRunner(side) for side in SIDES}


def test_each_side_is_sent_its_own_history_of_the_same_user_turns(presets, runners):
    arena, conv = fake_arena(presets, runners), chat.Conversation()
    list(chat.run(arena, request("first question"), conv))
    list(chat.run(arena, request("second question"), conv))
    assert [t.user for t in conv.turns] == ["first question", "second question"]
    first = {side: conv.turns[0].answer(side) for side in SIDES}
    assert first[BASELINE] != first[SPECULATIVE]  # the doubles answer differently: histories must not mix
    for side, other in ((BASELINE, SPECULATIVE), (SPECULATIVE, BASELINE)):
        sent = runners[side].prompts[1]
        assert sent == [{"role": "user", "content": "first question"},
                        {"role": "assistant", "content": first[side]},
                        {"role": "user", "content": "second question"}]
        assert first[other] not in str(sent)
    assert conv.preset == SMOLLM2 and not conv.busy and conv.full() is None
    assert conv.tokens[BASELINE] == len(plain_transcript(conv.messages(BASELINE)).split())


def test_a_chat_is_full_after_max_turns_and_says_so(presets, runners):
    arena, conv = fake_arena(presets, runners), chat.Conversation()
    for i in range(chat.MAX_TURNS):
        list(chat.run(arena, request(f"question {i}"), conv))
    sentence = conv.full()
    assert sentence == f"This chat has reached its {chat.MAX_TURNS} turns; press New chat to start another."
    with pytest.raises(DemoError) as refused:
        list(chat.run(arena, request("one more"), conv))
    assert str(refused.value) == sentence
    assert all(r.calls == chat.MAX_TURNS for r in runners.values())  # nothing ran
    assert len(conv.turns) == chat.MAX_TURNS and not conv.busy


def test_a_chat_is_bounded_in_tokens(presets):
    # A context of 60 "tokens" with 8 new ones and K=2: the speculative side may send 50.
    runners = {side: ChatRunner(side, max_context=60) for side in SIDES}
    arena, conv = fake_arena(presets, runners), chat.Conversation()
    with pytest.raises(DemoError, match=r"^The message is \d+ tokens long with the chat template; a turn may "
                                        r"send at most 50, so shorten it\.$"):
        list(chat.run(arena, request("word " * 60), conv))
    assert conv.turns == [] and not conv.busy
    list(chat.run(arena, request("word " * 20), conv))
    assert conv.limit == 50 and conv.full() is None
    with pytest.raises(DemoError, match=r"^This chat is full: with your message the conversation is \d+ tokens "
                                        r"and a turn may send at most 50; press New chat"):
        list(chat.run(arena, request("word " * 25), conv))
    assert len(conv.turns) == 1
    conv.tokens = {BASELINE: 40, SPECULATIVE: 45}  # no room left for a message
    assert conv.full() == ("This chat is full: its history is 45 tokens and a turn may send at most 50; "
                           "press New chat to start another.")


def test_a_chat_stays_on_its_preset_and_runs_one_turn_at_a_time(presets, runners):
    arena, conv = fake_arena(presets, runners), chat.Conversation()
    list(chat.run(arena, request("hi"), conv))
    other = next(name for name in presets.presets if name != SMOLLM2)
    with pytest.raises(DemoError, match=rf"runs on '{SMOLLM2}'; press New chat to talk to another model pair"):
        list(chat.run(arena, request("hi", preset=other), conv))
    conv.busy = True  # a turn of this chat in flight (a second tab, an API caller)
    with pytest.raises(DemoError, match="still running; wait for it or press Stop"):
        list(chat.run(arena, request("again"), conv))
    assert runners[BASELINE].calls == 1


def test_a_chat_keeps_its_speculative_method(presets, runners):
    arena, conv = fake_arena(presets, runners), chat.Conversation()
    list(chat.run(arena, request("hi"), conv))
    assert conv.method == SETTINGS.method
    free = GenerationSettings(max_new_tokens=8, assistant_tokens=2, method=FREE_DRAFT)
    with pytest.raises(DemoError, match=r"guesses by draft model; press New chat to use another speculative method"):
        list(chat.run(arena, request("hi", settings=free), conv))
    assert runners[BASELINE].calls == 1
    fresh = chat.Conversation()  # New chat: any method
    list(chat.run(arena, request("hi", settings=free), fresh))
    assert fresh.method == FREE_DRAFT and runners[BASELINE].calls == 2


def test_a_stopped_turn_keeps_what_each_side_wrote_and_an_empty_one_is_dropped(presets):
    stop = threading.Event()
    gate = threading.Event()

    def step(i):  # the second step waits until the turn was stopped
        if i == 1:
            gate.wait(5)

    runners = {side: ChatRunner(side, step=step) for side in SIDES}
    arena, conv = fake_arena(presets, runners), chat.Conversation()
    events = chat.run(arena, request("tell me"), conv, stop)
    seen = set()
    for event in events:
        if isinstance(event, ChunkEvent):
            seen.add(event.side)
            if seen == set(SIDES):
                stop.set()
                gate.set()
    turn = conv.turns[0]
    assert turn.stopped() and all(turn.answer(side) for side in SIDES) and not conv.busy
    # Stopped before anything was written: the turn is not part of the conversation.
    gate.clear()
    runners = {side: ChatRunner(side, step=lambda i: gate.wait(5)) for side in SIDES}
    arena = fake_arena(presets, runners)
    events = chat.run(arena, request("again"), conv)
    next(e for e in events if not hasattr(e, "message"))  # the first StartEvent
    events.close()
    gate.set()
    assert len(conv.turns) == 1 and not conv.busy


def result(side, n, start, end, cancelled=False):
    chunks = [Chunk(side, (i,), "x", "", start + (i + 1) * (end - start) / n) for i in range(n)]
    return RunResult(side, start=start, end=end, chunks=chunks, cancelled=cancelled)


def test_per_turn_and_cumulative_speeds_by_hand():
    conv = chat.Conversation()
    for user, base, spec in (("a", result(BASELINE, 10, 0.0, 2.0), result(SPECULATIVE, 10, 0.0, 1.0)),
                             ("b", result(BASELINE, 30, 5.0, 8.0), result(SPECULATIVE, 30, 5.0, 6.0))):
        turn = chat.Turn(user)
        for r in (base, spec):
            turn.record(DoneEvent(r.side, r))
        conv.turns.append(turn)
    first = chat.turn_stats(conv.turns[0])
    assert first[BASELINE].tokens_per_s == pytest.approx(5.0) and first[SPECULATIVE].tokens_per_s == pytest.approx(10.0)
    failed = chat.Turn("c")  # a turn one side failed: half a comparison, left out of the totals
    for r in (result(BASELINE, 1, 9.0, 9.5), result(SPECULATIVE, 50, 9.0, 10.0)):
        failed.record(DoneEvent(r.side, r))
    failed.results[BASELINE].error = "it broke"
    conv.turns.append(failed)
    totals = chat.cumulative(conv)  # 40 tokens in 5 s against 40 in 2 s
    assert totals[BASELINE].tokens_per_s == pytest.approx(8.0)
    assert totals[SPECULATIVE].tokens_per_s == pytest.approx(20.0)
    assert chat.speedup(totals[BASELINE], totals[SPECULATIVE]) == pytest.approx(2.5)


def test_the_page_says_whether_multi_turn_kv_reuse_is_on(monkeypatch):
    from demo.core import placement

    assert "is off for both sides" in chat.kv_reuse(PipelineOptions(), "draft")
    on = placement.SchedulerSettings(cache_size_gb=1, enable_prefix_caching=True)
    monkeypatch.setattr(placement, "scheduler_settings", lambda options: on)
    assert "is on for both sides" in chat.kv_reuse(PipelineOptions(), "draft")


# -- real inference -------------------------------------------------------------------------

class GenerateSpy:
    """Stands in for an LLMPipeline: records the text each generate() call was given."""

    def __init__(self, pipe, sent: list):
        self.pipe, self.sent = pipe, sent

    def generate(self, inputs, *args, **kwargs):
        self.sent.append(inputs[0])
        return self.pipe.generate(inputs, *args, **kwargs)


def test_a_two_turn_chat_sends_each_side_its_own_templated_conversation(session_store, smollm2_ir):
    from demo.engine.pipelines import PipelineCache

    # The pipelines in this process, where generate() can be watched (the arena's own run in children).
    arena = Arena(load_presets(None), session_store, PipelineCache(max_pairs=1))
    settings = GenerationSettings(max_new_tokens=12, assistant_tokens=3)
    conv = chat.Conversation()
    list(chat.run(arena, request("Name a colour.", settings=settings), conv))
    runners = arena.runners(RaceRequest(prompt="x", preset=SMOLLM2, settings=settings))
    sent = {side: [] for side in SIDES}
    real = {side: runners[side].pipe for side in SIDES}
    try:
        for side in SIDES:
            runners[side].pipe = GenerateSpy(real[side], sent[side])
        list(chat.run(arena, request("Name another one.", settings=settings), conv))
    finally:
        for side in SIDES:
            runners[side].pipe = real[side]
    assert len(conv.turns) == 2 and not any(r.error for t in conv.turns for r in t.results.values())
    for side in SIDES:
        answer = conv.turns[0].answer(side)
        assert answer.strip() and conv.turns[1].answer(side).strip()
        (text,) = sent[side]
        # SmolLM2's chat template: turn 1's message and this side's own answer, then turn 2's.
        assert (f"<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n{answer}<|im_end|>\n"
                f"<|im_start|>user\nName another one.<|im_end|>\n<|im_start|>assistant\n") in text
        assert text == runners[side].template(conv.messages(side)[:-1])
    assert conv.tokens[BASELINE] > 0 and conv.full() is None


def test_a_free_drafting_chat_in_exact_mode_answers_every_turn_as_the_main_alone(session_store, smollm2_ir):
    """Free drafting (the own verify loop) in a chat: each side is sent its own history, and in exact
    mode the speculative side's answer to every turn is the plain baseline's, token for token (the
    baseline is OpenVINO GenAI's pipeline: an independent implementation of greedy decoding)."""
    from demo.engine.pipelines import PipelineCache
    from demo.engine.verify_loop.runner import OwnLoopRunner

    arena = Arena(load_presets(None), session_store, PipelineCache(max_pairs=1))
    settings = GenerationSettings(max_new_tokens=24, assistant_tokens=3, method=FREE_DRAFT)
    exact = PipelineOptions(exact=True)
    conv = chat.Conversation()
    # The second turn asks for the first answer again: its history holds the text the drafters guess from.
    for text in ("Write a Python function that adds two numbers.", "Repeat your last answer exactly."):
        list(chat.run(arena, RaceRequest(prompt=text, preset=SMOLLM2, settings=settings, options=exact), conv))
    runners = arena.runners(RaceRequest(prompt="x", preset=SMOLLM2, settings=settings, options=exact, mode="race"))
    assert isinstance(runners[SPECULATIVE], OwnLoopRunner), "the speculative side is not the own loop"
    assert conv.method == FREE_DRAFT and len(conv.turns) == 2
    for turn in conv.turns:
        assert not any(r.error for r in turn.results.values())
        ids = {side: turn.results[side].token_ids for side in SIDES}
        assert len(ids[BASELINE]) > 4 and ids[SPECULATIVE] == ids[BASELINE]
    # Guesses were verified and kept (the turns repeat their own history), so equality was tested.
    kept = sum(kept for turn in conv.turns for _, _, kept in (turn.results[SPECULATIVE].guess_sources or {}).values())
    assert kept > 0, "no guess was kept: the equality above did not test the verify loop"
    # The second turn was sent the first turn's answer: its history, templated.
    assert conv.tokens[SPECULATIVE] > runners[SPECULATIVE].count_tokens(
        runners[SPECULATIVE].template([{"role": "user", "content": conv.turns[1].user}]))


def test_the_panes_show_both_sides_turns_as_text_with_each_turns_speed():
    from demo.web import chat_tab

    conv = chat.Conversation()
    for user, base, spec in (("<script>alert(1)</script>", result(BASELINE, 10, 0.0, 2.0),
                              result(SPECULATIVE, 10, 0.0, 1.0)),
                             ("second", result(BASELINE, 30, 5.0, 8.0), result(SPECULATIVE, 30, 5.0, 6.0))):
        turn = chat.Turn(user)
        for r in (base, spec):
            r.chunks[0] = Chunk(r.side, (0,), "<img src=x onerror=alert(1)>", "", r.chunks[0].t)
            turn.record(DoneEvent(r.side, r))
        conv.turns.append(turn)
    for side in SIDES:
        pane = chat_tab.pane_html(conv, side)
        assert "<script" not in pane and "<img" not in pane
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in pane and "&lt;img src=x onerror=alert(1)&gt;" in pane
        assert pane.count('class="chat-turn"') == 2 and 'data-turns="2"' in pane
    table = chat_tab.turns_html(conv)
    assert "data-turn='1' data-speedup='2.0000'" in table and "data-turn='2' data-speedup='3.0000'" in table
    assert "class='chat-total' data-speedup='2.5000'" in table
