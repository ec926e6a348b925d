"""The engine's admission point: one job on the CPU at a time, first come first served,
cancellable while waiting, released by the workers (not by whoever closed the stream).

Pure logic with fake runners; the real path (OpenVINO pipelines behind the same
admission) is exercised by tests/test_app.py and tests/test_load.py.
"""

import threading
import time

import pytest

from demo.core.settings import GenerationSettings
from demo.core.streaming import BASELINE, SPECULATIVE
from demo.engine.admission import Admission, Cancelled, QueueFull
from demo.engine.race import race
from tests.fakes import FakeRunner

HANG_GUARD_S = 20


def test_jobs_are_served_one_at_a_time_in_arrival_order():
    admission = Admission()
    first = admission.enter("first")
    order, started = [], []

    def job(name):
        started.append(name)
        ticket = admission.enter(name)
        order.append(name)
        time.sleep(0.02)
        ticket.release()

    threads = []
    for name in ("a", "b", "c"):
        t = threading.Thread(target=job, args=(name,))
        t.start()
        threads.append(t)
        while name not in started or admission.state()["waiting"] < len(threads):
            time.sleep(0.005)  # make the arrival order certain
    assert order == []  # all wait while the first job holds the slot
    first.release()
    for t in threads:
        t.join(HANG_GUARD_S)
    assert order == ["a", "b", "c"]
    assert admission.state() == {"running": None, "waiting": 0}


def test_waiting_job_sees_its_place_and_can_be_cancelled():
    admission = Admission()
    holder = admission.enter("a race")
    stop = threading.Event()
    messages, outcome = [], {}

    def wait():
        try:
            admission.enter("mine", stop, messages.append)
        except Cancelled as e:
            outcome["cancelled"] = str(e)

    t = threading.Thread(target=wait)
    t.start()
    while not messages:
        time.sleep(0.005)
    assert messages[0] == "waiting for the machine: 1 run ahead of you (a race running)"
    stop.set()
    t.join(HANG_GUARD_S)
    assert "Stopped" in outcome["cancelled"]
    assert admission.state()["waiting"] == 0  # a cancelled job leaves the line
    holder.release()
    admission.enter("next").release()  # and the slot is free for the next one


def test_queue_full_is_refused_with_a_sentence():
    admission = Admission(max_waiting=1)
    holder = admission.enter("a race")
    stop = threading.Event()
    t = threading.Thread(target=lambda: pytest.raises(Cancelled, admission.enter, "w", stop))
    t.start()
    while admission.state()["waiting"] < 1:
        time.sleep(0.005)
    with pytest.raises(QueueFull, match="already waiting for this machine; try again in a minute"):
        admission.enter("one too many")
    stop.set()
    t.join(HANG_GUARD_S)
    holder.release()


def test_release_is_idempotent():
    admission = Admission()
    ticket = admission.enter("x")
    other = threading.Event()
    ticket.release()
    second = admission.enter("y")
    ticket.release()  # a late second release of the old ticket must not free y's slot
    got = []
    t = threading.Thread(target=lambda: (admission.enter("z", other), got.append("z")))
    t.start()
    time.sleep(0.3)
    assert got == []
    second.release()
    t.join(HANG_GUARD_S)
    assert got == ["z"]


def test_slot_is_released_when_the_workers_end_not_when_the_stream_closes():
    admission = Admission()
    ticket = admission.enter("a race")
    # Every step waits for `gate`: until the test opens it, both sides are inside a model step.
    # Closing the stream must not wait for that step, but the slot stays taken until both
    # sides have really returned. (Judged by events: no clock.)
    gate = threading.Event()
    inside = {s: threading.Event() for s in (BASELINE, SPECULATIVE)}

    def step(side):
        return lambda i: (inside[side].set(), gate.wait(HANG_GUARD_S))

    runners = {s: FakeRunner(s, [1] * 50, step=step(s)) for s in (BASELINE, SPECULATIVE)}
    stream = race(runners, "p", GenerationSettings(max_new_tokens=50), on_finished=ticket.release)
    next(stream)  # a StartEvent
    assert all(e.wait(HANG_GUARD_S) for e in inside.values())  # both sides are inside a step
    stream.close()
    # close() returned while both steps were still waiting for the gate: it did not wait for them.
    assert not any(r.finished.is_set() for r in runners.values())
    assert admission.state()["running"] == "a race"
    gate.set()
    assert all(r.finished.wait(HANG_GUARD_S) for r in runners.values())
    deadline = time.monotonic() + HANG_GUARD_S
    while admission.state()["running"] is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert admission.state()["running"] is None
    # Stop was honoured: each side ended after the step it was in, not after its 50 steps.
    assert all(r.delivered <= 1 for r in runners.values()), [r.delivered for r in runners.values()]


def test_a_follow_up_goes_before_the_line_and_is_never_refused():
    admission = Admission(max_waiting=1)
    holder = admission.enter("a race")
    order = []

    def job(name, enter):
        ticket = enter(name)
        order.append(name)
        ticket.release()

    waiting = threading.Thread(target=job, args=("next visitor", admission.enter))
    waiting.start()
    while admission.state()["waiting"] < 1:
        time.sleep(0.005)
    with pytest.raises(QueueFull):
        admission.enter("one too many")  # the line is full for a new job…
    sequel = threading.Thread(target=job, args=("step view", admission.follow_up))
    sequel.start()  # …but not for a finished job's sequel
    while admission.state()["waiting"] < 2:
        time.sleep(0.005)
    holder.release()
    for t in (waiting, sequel):
        t.join(HANG_GUARD_S)
    assert order == ["step view", "next visitor"]
    assert admission.state() == {"running": None, "waiting": 0}


def test_claims_of_rotating_sessions_whose_jobs_ended_leave_no_key_behind():
    # A script without an address key rotates its session each request: every claim's job ends
    # (Gradio forgets the event), and the next claim forgets them all, not just its own keys.
    admission = Admission()
    running = [True] * 200
    for i in range(200):
        admission.claim("a race", (f"session:{i}",), alive=lambda i=i: running[i])
    assert admission.claims() == 200
    running[:] = [False] * 200  # every job ended; nobody released its claim
    alive = admission.claim("a race", ("session:new",), alive=lambda: True)
    assert admission.claims() == 1
    alive.release()
    assert admission.claims() == 0
