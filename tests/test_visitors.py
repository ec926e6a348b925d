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

from demo.engine.admission import Admission, VisitorBusy
from demo.web.visitors import keys_of
from tests.test_bad_inputs import assert_one_clear_sentence, race_args

HANG_GUARD_S = 120
BUSY = "You already have a race running or waiting; wait for it to finish or press Stop."


def wait_for(condition, what: str, timeout_s: float = HANG_GUARD_S) -> None:
    deadline = time.monotonic() + timeout_s  # a hang guard, not a speed bound
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


# -- the rule, in the engine ------------------------------------------------------------------

def test_a_visitor_with_a_job_running_or_waiting_is_refused_and_others_are_not():
    admission = Admission()
    first = admission.claim("a race", ("session:a",))
    running = admission.enter("a race")
    with pytest.raises(VisitorBusy) as info:
        admission.claim("a race", ("session:a",))
    assert str(info.value) == BUSY
    assert admission.state() == {"running": "a race", "waiting": 0}  # the refusal did not join the line

    # Another visitor is admitted and waits in line; meanwhile its own second job is refused too,
    # also from a new session on the same address.
    stop, got = threading.Event(), []
    second = admission.claim("a fair measurement", ("session:b", "address:93.184.216.34"))
    t = threading.Thread(target=lambda: got.append(admission.enter("a fair measurement", stop)))
    t.start()
    wait_for(lambda: admission.state()["waiting"] == 1, "the second visitor in line")
    with pytest.raises(VisitorBusy, match="^You already have a fair measurement running or waiting"):
        admission.claim("a race", ("session:c", "address:93.184.216.34"))
    running.release()
    first.release()  # the first visitor's stream ended
    t.join(HANG_GUARD_S)
    # Released: the first visitor may start again (and waits behind b), b still may not.
    again = admission.claim("a race", ("session:a",))
    with pytest.raises(VisitorBusy):
        admission.claim("a race", ("session:b",))
    got[0].release()
    second.release()
    again.release()
    admission.claim("a race", ("session:b", "address:93.184.216.34")).release()
    assert admission.state() == {"running": None, "waiting": 0}


def test_a_claim_lasts_as_long_as_its_with_block():
    admission = Admission()
    with admission.visiting("a three-way race", ("session:a",)):
        with pytest.raises(VisitorBusy, match="^You already have a three-way race running or waiting"):
            admission.claim("a race", ("session:a",))
    admission.claim("a race", ("session:a",)).release()
    admission.claim("a race", ()).release()  # no keys (in-process callers): never limited
    admission.claim("a race", ()).release()


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
