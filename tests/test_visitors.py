"""One visitor, one heavy job (issue 21, item 3): a client that submits race after race is
refused with a sentence while its first one waits or runs; other visitors still get in line.

The rule is the engine's (Admission.enter, keyed by opaque visitor keys); the page makes the
keys from the Gradio session and, where it knows it, the client's address (demo.web.visitors).
"""

from __future__ import annotations

import threading
import time

import pytest
from gradio_client import Client

from demo.engine.admission import Admission, Cancelled, VisitorBusy
from demo.web.visitors import keys_of
from tests.test_bad_inputs import assert_one_clear_sentence, race_args

HANG_GUARD_S = 120
REFUSAL_GUARD_S = 5  # a refusal is immediate; only a missing rule waits this long
BUSY = "You already have a race running or waiting; wait for it to finish or press Stop."


def wait_for(condition, what: str, timeout_s: float = HANG_GUARD_S) -> None:
    deadline = time.monotonic() + timeout_s  # a hang guard, not a speed bound
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


# -- the rule, in the engine ------------------------------------------------------------------

def test_a_visitor_with_a_job_running_or_waiting_is_refused_and_others_are_not():
    admission = Admission()
    running = admission.enter("a race", visitor=("session:a",))
    with pytest.raises(VisitorBusy) as info:  # timeout_s: without the rule it would wait, not hang the test
        admission.enter("a race", visitor=("session:a",), timeout_s=REFUSAL_GUARD_S)
    assert str(info.value) == BUSY
    assert admission.state() == {"running": "a race", "waiting": 0}  # the refusal did not join the line

    # Another visitor waits in line; while it waits, its own second job is refused too.
    stop, got = threading.Event(), []
    t = threading.Thread(target=lambda: got.append(admission.enter("a fair measurement", stop,
                                                                   visitor=("session:b", "address:93.184.216.34"))))
    t.start()
    wait_for(lambda: admission.state()["waiting"] == 1, "the second visitor in line")
    with pytest.raises(VisitorBusy, match="^You already have a fair measurement running or waiting"):
        admission.enter("a race", visitor=("session:c", "address:93.184.216.34"),  # same address, new session
                        timeout_s=REFUSAL_GUARD_S)
    running.release()
    t.join(HANG_GUARD_S)
    # Released: the first visitor may start again (it waits behind b).
    waiting = threading.Thread(target=lambda: pytest.raises(Cancelled, admission.enter, "a race", stop,
                                                            visitor=("session:a",)))
    waiting.start()
    wait_for(lambda: admission.state()["waiting"] == 1, "the first visitor back in line")
    stop.set()  # a job cancelled while waiting frees its visitor's keys
    waiting.join(HANG_GUARD_S)
    got[0].release()
    admission.enter("a race", visitor=("session:a",)).release()
    assert admission.state() == {"running": None, "waiting": 0}


def test_jobs_without_a_visitor_are_not_limited():
    admission = Admission()
    first = admission.enter("measuring this machine once")
    stop = threading.Event()
    t = threading.Thread(target=lambda: pytest.raises(Cancelled, admission.enter, "loading models", stop))
    t.start()
    wait_for(lambda: admission.state()["waiting"] == 1, "the operator's second job in line")
    stop.set()
    t.join(HANG_GUARD_S)
    first.release()


def test_visitor_keys_use_the_address_only_where_it_names_the_visitor():
    assert keys_of("s1", "127.0.0.1") == ("session:s1",)          # loopback: a local proxy or the operator
    assert keys_of("s1", "10.0.3.7") == ("session:s1",)           # private: a platform's load balancer
    assert keys_of("s1", "93.184.216.34") == ("session:s1", "address:93.184.216.34")
    assert keys_of("s1", "testclient") == ("session:s1",)
    assert keys_of(None, None) == ()
    # Only with --trust-forwarded-for: the address the operator's proxy appended last.
    assert keys_of("s1", "127.0.0.1", "1.2.3.4, 93.184.216.35") == ("session:s1", "address:93.184.216.35")


# -- through the page, as a stranger's client sends it ------------------------------------------

STORY = "Write a long story about a lighthouse keeper and a storm."


def test_a_second_race_from_the_same_client_is_refused_while_another_client_gets_in(running_app):
    arena = running_app.arena
    hog, other = Client(running_app.local_url, verbose=False), Client(running_app.local_url, verbose=False)
    try:
        first = hog.submit(*race_args(prompt=STORY, max_new_tokens=1024), api_name="/race")
        wait_for(lambda: arena.admission.state()["running"] == "a race", "the first race to hold the machine")
        second = hog.submit(*race_args(max_new_tokens=16), api_name="/race")
        with pytest.raises(Exception) as info:
            second.result(timeout=HANG_GUARD_S)
        assert_one_clear_sentence(str(info.value), BUSY)
        assert not first.done()  # the refusal did not touch the running race

        admitted = other.submit(*race_args(max_new_tokens=16), api_name="/race")
        wait_for(lambda: arena.admission.state()["waiting"] == 1, "the other client's race in line")
        first.cancel()  # Stop: the other client's race runs next, and completes
        admitted.result(timeout=HANG_GUARD_S)
        assert 'data-tokens="16"' in admitted.outputs()[-1][3]
        # The first client's job has ended: it may race again.
        wait_for(lambda: arena.admission.state() == {"running": None, "waiting": 0}, "the machine to be free")
        again = hog.submit(*race_args(max_new_tokens=16), api_name="/race")
        again.result(timeout=HANG_GUARD_S)
        assert 'data-tokens="16"' in again.outputs()[-1][3]
    finally:
        hog.close()
        other.close()
