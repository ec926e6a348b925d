"""The Chat tab's endpoint (/chat) as a stranger calls it, through gradio_client: every bad
value is one sentence, a chat is bounded in turns, and a turn of a chat still running is
refused, never raced twice on one history. (tests/test_bad_inputs.py does the same for /race.)"""

from __future__ import annotations

import time

import pytest
from gradio_client import Client

from demo.engine import chat

from .conftest import SMOLLM2
from .test_bad_inputs import NOT_PREPARED, assert_one_clear_sentence, wait_idle

pytestmark = pytest.mark.usefixtures("running_app")


def chat_args(message="Name a colour.", preset=SMOLLM2, max_new_tokens=4, k=2, method="draft model") -> list:
    """The 5 values of /chat, in the page's order (the conversation is the session's own state)."""
    return [message, preset, max_new_tokens, k, method]


@pytest.fixture(scope="module")
def url(running_app):
    deadline = time.monotonic() + 300  # the app's own warm-up holds the slot until it is ready
    while running_app.arena.startup.get()[0] not in ("ready", "failed") and time.monotonic() < deadline:
        time.sleep(0.2)
    return running_app.local_url


@pytest.fixture(scope="module")
def arena(running_app):
    return running_app.arena


def refused(client, args) -> str:
    with pytest.raises(Exception) as info:
        client.predict(*args, api_name="/chat")
    return str(info.value)


CHAT_REFUSALS = [
    ("empty message", chat_args(message=" "), ["The prompt is empty; type a question"]),
    ("message None", chat_args(message=None), ["The prompt is empty"]),
    ("message a number", chat_args(message=5), ["The prompt must be text"]),
    ("message of 16,001 characters", chat_args(message="a" * 16_001), ["16,001 characters long; the limit is 16,000"]),
    ("unknown preset", chat_args(preset="no-such-preset"), ["'model pair' must be one of:"]),
    ("hub preset not prepared", chat_args(preset=NOT_PREPARED), [f"`python -m demo.prepare --preset {NOT_PREPARED}`"]),
    ("max new tokens 0", chat_args(max_new_tokens=0),
     [f"'max new tokens' must be a whole number from 1 to {chat.MAX_NEW_TOKENS}", "reset it and try again"]),
    ("max new tokens 1024", chat_args(max_new_tokens=1024), [f"from 1 to {chat.MAX_NEW_TOKENS}"]),
    ("max new tokens '12'", chat_args(max_new_tokens="12"), ["'max new tokens' must be a whole number"]),
    ("K 0", chat_args(k=0), ["'assistant tokens' must be a whole number from 1 to 16"]),
    ("K None", chat_args(k=None), ["'assistant tokens' must be a whole number"]),
    ("unknown method", chat_args(method="telepathy"), ["'speculative method' must be one of:", "free drafting"]),
]


@pytest.mark.parametrize("args, fragments", [c[1:] for c in CHAT_REFUSALS], ids=[c[0] for c in CHAT_REFUSALS])
def test_chat_refuses_bad_values_with_one_sentence(url, arena, args, fragments):
    client = Client(url, verbose=False)
    try:
        assert_one_clear_sentence(refused(client, args), *fragments)
    finally:
        client.close()
    wait_idle(arena)


def test_a_chat_is_full_after_its_turns_and_a_second_turn_at_once_is_refused(url, arena):
    client = Client(url, verbose=False)
    try:
        for i in range(chat.MAX_TURNS):
            out = client.predict(*chat_args(message=f"Say {i}.", max_new_tokens=1), api_name="/chat")
        status = out[5]
        assert status == f"This chat has reached its {chat.MAX_TURNS} turns; press New chat to start another."
        message = refused(client, chat_args(message="One more."))
        assert_one_clear_sentence(message, status)
    finally:
        client.close()
    wait_idle(arena)
    # Another visitor (another session) has a chat of its own; one turn of it at a time.
    other = Client(url, verbose=False)
    try:
        long_turn = other.submit(*chat_args(message="Write a long story about a lighthouse.",
                                            max_new_tokens=chat.MAX_NEW_TOKENS), api_name="/chat")
        deadline = time.monotonic() + 120  # hang guard: the turn starts streaming long before
        while "Racing turn 1" not in str(long_turn.outputs()[-1:]) and time.monotonic() < deadline:
            time.sleep(0.05)
        # A chat turn is the visitor's one job (demo.web.visitors.QueueDoor): refused where Gradio accepts
        # events, HTTP 429 with "You already have a chat turn running or waiting; …" (the page shows it).
        assert "429" in refused(other, chat_args(message="And another."))
        long_turn.cancel()
    finally:
        other.close()
    wait_idle(arena, timeout_s=60)
