"""One visitor, one heavy job (issue 21, item 3): a client that submits race after race is
refused with a sentence while its first one waits or runs; other visitors still get in line.

The rule is the engine's (Admission.enter, keyed by opaque visitor keys); the page makes the
keys from the Gradio session and, where it knows it, the client's address (demo.web.visitors).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import pytest
from gradio_client import Client

from demo.engine.admission import Admission, VisitorBusy
from demo.web.visitors import VisitorIds
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
    keys_of = VisitorIds().keys_of
    assert keys_of("s1", "127.0.0.1") == ("session:s1",)          # loopback: the operator or a local proxy
    assert keys_of("s1", "::1") == ("session:s1",)
    assert keys_of("s1", "10.0.3.7") == ("session:s1", "address:10.0.3.7")  # a booth LAN's visitor
    assert keys_of("s1", "93.184.216.34") == ("session:s1", "address:93.184.216.34")
    assert keys_of("s1", "testclient") == ("session:s1",)
    assert keys_of(None, None) == ()
    # Without a proxy to trust, X-Forwarded-For is the client's own words: never read.
    assert keys_of(None, "93.184.216.34", "1.2.3.4") == ("address:93.184.216.34",)
    # --trust-forwarded-for: the address the operator's proxy appended last (a LAN address too).
    proxied = VisitorIds(trust_forwarded_for=True).keys_of
    assert proxied("s1", "127.0.0.1", "1.2.3.4, 93.184.216.35") == ("session:s1", "address:93.184.216.35")
    assert proxied("s1", "127.0.0.1", "1.2.3.4, 192.168.1.20") == ("session:s1", "address:192.168.1.20")


def test_on_a_space_the_visitor_is_the_rightmost_public_forwarded_address():
    keys_of = VisitorIds(on_space=True).keys_of
    # The platform's proxies append what they saw and sit on private addresses; what the client
    # wrote itself is to the left and is never read.
    assert keys_of(None, "10.16.3.80", "93.184.216.34") == ("address:93.184.216.34",)
    assert keys_of(None, "10.16.3.80", "6.6.6.6, 93.184.216.34, 10.16.0.2") == ("address:93.184.216.34",)
    assert keys_of("s", "10.16.3.80", "1.1.1.1, 2.2.2.2, 93.184.216.34") == ("session:s", "address:93.184.216.34")
    # No public address in it: no address key (the door's per-lane bounds for the anonymous apply).
    assert keys_of("s", "10.16.3.80", "10.0.0.1") == ("session:s",)
    assert keys_of("s", "10.16.3.80", None) == ("session:s",)
    assert VisitorIds.from_environment().on_space is False


def test_a_claim_whose_job_gradio_forgot_is_free_and_a_finished_race_gives_way_to_its_sessions_next():
    admission = Admission()
    live = {"yes": True}
    claim = admission.claim("a race", ("session:a", "address:1.2.3.4"), alive=lambda: live["yes"],
                            successor="session:a")
    with pytest.raises(VisitorBusy):
        admission.claim("a replay", ("session:b", "address:1.2.3.4"))
    # The same session's next Run is refused while the race runs, admitted once its step view may go.
    with pytest.raises(VisitorBusy):
        admission.claim("a race", ("session:a", "address:1.2.3.4"))
    claim.give_way()
    with pytest.raises(VisitorBusy):
        admission.claim("a race", ("session:z", "address:1.2.3.4"))  # another session: still one job
    second = admission.claim("a race", ("session:a", "address:1.2.3.4"), alive=lambda: True)
    claim.release()  # the superseded job ends: the newer claim keeps the keys
    with pytest.raises(VisitorBusy):
        admission.claim("a race", ("address:1.2.3.4",))
    second.release()
    # A claim whose event Gradio dropped without a release (its client vanished) frees its keys.
    third = admission.claim("a race", ("address:1.2.3.4",), alive=lambda: live["yes"])
    live["yes"] = False
    admission.claim("a race", ("address:1.2.3.4",)).release()
    # A held claim covers the job run under it and stays its holder's to release.
    with admission.visiting("a chat turn", third) as ticket:
        assert ticket is third


# -- through the page, as a stranger's client sends it ------------------------------------------

STORY = "Write a long story about a lighthouse keeper and a storm."


def test_a_second_race_from_the_same_client_is_refused_while_another_client_gets_in(running_app):
    arena = running_app.arena
    hog, other = Client(running_app.local_url, verbose=False), Client(running_app.local_url, verbose=False)
    try:
        first = hog.submit(*race_args(prompt=STORY, max_new_tokens=1024), api_name="/race")
        wait_for(lambda: arena.admission.state()["running"] == "a race", "the first race to hold the machine")
        # Refused where Gradio's queue accepts events (demo.web.visitors.QueueDoor): HTTP 429 and the
        # sentence (the page shows it; gradio_client raises its HTTP error), nothing queued.
        second = hog.submit(*race_args(max_new_tokens=16), api_name="/race")
        with pytest.raises(Exception, match="429"):
            second.result(timeout=HANG_GUARD_S)
        fn_index = next(fn._id for fn in running_app.fns.values() if fn.api_name == "race")
        request = urllib.request.Request(running_app.local_url + "gradio_api/queue/join", headers={
            "Content-Type": "application/json"}, data=json.dumps({
                "data": race_args(max_new_tokens=16), "fn_index": fn_index, "session_hash": hog.session_hash,
                "event_data": None, "trigger_id": None}).encode())
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(request, timeout=60)
        assert info.value.code == 429
        assert_one_clear_sentence(json.loads(info.value.read())["detail"], BUSY)
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


def test_the_space_rule_stops_at_an_entry_it_cannot_parse_and_keys_ipv6_per_64():
    keys_of = VisitorIds(on_space=True).keys_of
    # Whatever is left of an entry that is not an address was written by the client: never read.
    assert keys_of(None, "10.16.3.80", "93.184.216.34, not-an-address, 10.16.0.2") == ()
    assert keys_of(None, "10.16.3.80", "93.184.216.34, unknown") == ()
    # One household's or host's IPv6 range is one visitor, as ISPs hand out a /64.
    a = keys_of(None, "10.16.3.80", "2a00:1450:4001:81c::200e")
    b = keys_of(None, "10.16.3.80", "2a00:1450:4001:81c:ffff:1:2:3")
    assert a == b == ("address:2a00:1450:4001:81c::/64",)
    assert keys_of(None, "10.16.3.80", "2a00:1450:4001:81d::1") != a
    assert keys_of(None, "10.16.3.80", "::ffff:93.184.216.34") == ("address:93.184.216.34",)
    assert VisitorIds().keys_of(None, "2a00:1450:4001:81c::1") == ("address:2a00:1450:4001:81c::/64",)


def test_repeated_forwarded_headers_are_read_as_one_list_in_order():
    from demo.web.visitors import forwarded_for

    headers = [(b"x-forwarded-for", b"6.6.6.6"), (b"host", b"x"), (b"X-Forwarded-For", b"1.2.3.4, 93.184.216.34")]
    assert forwarded_for(headers) == "6.6.6.6,1.2.3.4, 93.184.216.34"
    scope = {"client": ("10.16.3.80", 1), "headers": headers}
    assert VisitorIds(on_space=True).keys_of_scope(scope) == ("address:93.184.216.34",)


# -- the door, on a stand-in for Gradio's queue ------------------------------------------------

class StandInQueue:
    """What the door reads of Gradio's Queue: its handlers, the events it holds, its lines."""

    def __init__(self, fns: dict):
        from types import SimpleNamespace

        self.blocks = SimpleNamespace(fns=fns)
        self.event_ids_to_events: dict = {}
        self.event_queue_per_concurrency_id: dict = {}
        self._n = 0

    async def push(self, body, request, username):
        self._n += 1
        event_id = f"event-{self._n}"
        self.event_ids_to_events[event_id] = object()  # held until the test "finishes" it
        return True, event_id, "success"


def knock(door, queue, fn_index: int, session: str, address: str):
    """One queue/join through the door: (accepted, event id or the refusal's sentence)."""
    import asyncio
    from types import SimpleNamespace

    from fastapi import HTTPException

    body = SimpleNamespace(fn_index=fn_index, session_hash=session)
    request = SimpleNamespace(scope={"client": ("10.16.3.80", 1), "headers": [(b"x-forwarded-for", address.encode())]})
    try:
        ok, event_id, _ = asyncio.run(queue.push(body, request, None))
        return ok, event_id
    except HTTPException as e:
        return False, e.detail


def test_a_shared_address_holds_as_many_jobs_as_the_operator_allows_and_each_session_one():
    from types import SimpleNamespace

    from demo.web.visitors import QueueDoor

    race = SimpleNamespace(_id=0, concurrency_id="race")
    queue = StandInQueue({0: race})
    door = QueueDoor(VisitorIds(on_space=True, per_address=2), Admission())
    door.heavy("a race", {"id": 0})
    door.install(SimpleNamespace(_queue=queue))
    venue = "93.184.216.80"  # one NAT address, a crowd behind it
    first, second = knock(door, queue, 0, "s1", venue), knock(door, queue, 0, "s2", venue)
    assert first[0] and second[0]
    assert knock(door, queue, 0, "s3", venue) == (
        False, "This address already has 2 jobs running or waiting, the most it may hold at once; wait for one to finish.")
    assert knock(door, queue, 0, "s4", "93.184.216.81")[0]  # another address is not touched
    del queue.event_ids_to_events[first[1]]  # the first job ends
    assert knock(door, queue, 0, "s2", venue) == (False, BUSY)  # a session still holds its own one job
    assert knock(door, queue, 0, "s3", venue)[0]
    # One visitor per address (the default): a second session at the same address is refused.
    single = StandInQueue({0: race})
    door = QueueDoor(VisitorIds(on_space=True), Admission())
    door.heavy("a race", {"id": 0})
    door.install(SimpleNamespace(_queue=single))
    assert knock(door, single, 0, "s1", venue)[0]
    assert knock(door, single, 0, "s2", venue) == (False, BUSY)
