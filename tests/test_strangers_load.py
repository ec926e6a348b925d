"""A scripted stranger against the launched page, as a Space serves it (issue 31): SPACE_ID set,
each client's address in X-Forwarded-For as the platform's proxy sends it, raw HTTP.

Judged by events (who reached the admission point, in what order; what each request was
answered), never by a wall-clock bound: a hang guard only stops a stuck test.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
import urllib.error
import urllib.request
import uuid
from urllib.parse import urlparse

import pytest
from gradio_client import Client

from demo.records import playback, recording
from tests.conftest import SMOLLM2, _free_port
from tests.test_bad_inputs import race_args
from tests.test_load import AdmissionSpy

HANG_GUARD_S = 240
STORY = "Write a long story about a lighthouse keeper and a storm."
BUSY = "You already have a race running or waiting; wait for it to finish or press Stop."
ATTACKER, VISITOR = "93.184.216.34", "93.184.216.35"


@pytest.fixture(scope="module")
def space_app(session_store, smollm2_ir):
    """The page as `python app.py` runs it on a Space (SPACE_ID set), with the SmolLM2 pair loaded."""
    import app

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPACE_ID", "tests/arena")
        demo = app.make_demo(preset=SMOLLM2, cache_dir=session_store.cache_dir, bench=False)
        app.launch(demo, port=_free_port(), prevent_thread_lock=True, quiet=True)
        try:
            wait_for(lambda: demo.arena.startup.get()[0] in ("ready", "failed"), "the startup warm-up")
            assert demo.arena.startup.get()[0] == "ready", demo.arena.startup.get()
            yield demo
        finally:
            demo.close()


def wait_for(condition, what: str, timeout_s: float = HANG_GUARD_S) -> None:
    deadline = time.monotonic() + timeout_s  # a hang guard, not a speed bound
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def idle(arena) -> None:
    wait_for(lambda: arena.admission.state() == {"running": None, "waiting": 0}, "an idle machine")


def post(url: str, body: dict, address: str) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={
        "Content-Type": "application/json", "X-Forwarded-For": address})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def read_stream(url: str, address: str, lines: list) -> None:
    """Keep an event stream open to its end, as the stranger's script did."""
    request = urllib.request.Request(url, headers={"X-Forwarded-For": address})
    try:
        with urllib.request.urlopen(request, timeout=HANG_GUARD_S) as r:
            for line in r:
                lines.append(line)
    except OSError:
        pass


def test_one_address_sending_20_races_without_a_session_gets_one_and_the_next_visitor_is_next(space_app, monkeypatch):
    arena = space_app.arena
    idle(arena)
    spy = AdmissionSpy(arena.admission)
    monkeypatch.setattr(arena.admission, "enter", spy.enter)
    url = space_app.local_url
    body = {"data": race_args(prompt=STORY, max_new_tokens=128)}
    answers = [post(url + "gradio_api/call/race", body, ATTACKER) for _ in range(20)]
    accepted = [a for code, a in answers if code == 200]
    refused = [(code, a.get("detail")) for code, a in answers if code != 200]
    streams = []
    for a in accepted:  # the script keeps every stream it got open
        lines: list = []
        threading.Thread(target=read_stream, args=(f"{url}gradio_api/call/race/{a['event_id']}", ATTACKER, lines),
                         daemon=True).start()
        streams.append(lines)
    wait_for(lambda: spy.jobs, "the stranger's race to reach the machine")
    visitor = Client(url, headers={"X-Forwarded-For": VISITOR}, verbose=False)
    try:
        job = visitor.submit(*race_args(max_new_tokens=8), api_name="/race")
        job.result(timeout=HANG_GUARD_S)
        assert 'data-tokens="8"' in job.outputs()[-1][3]
    finally:
        visitor.close()
    assert len(accepted) == 1 and refused == [(429, BUSY)] * 19, (len(accepted), refused[:3])
    # The visitor waited one race at most: only the stranger's one race reached the machine before it.
    assert [j["what"] for j in spy.jobs] == ["a race", "a race"]
    assert spy.jobs[1]["granted"] >= spy.jobs[0]["released"]
    wait_for(lambda: any(b"event: complete" in line for line in streams[0]), "the stranger's race to end")


def replay_fn_index(demo) -> int:
    return next(fn._id for fn in demo.fns.values() if fn.name == "replay_shipped")


def test_24_replays_by_fn_index_cannot_fill_the_line_a_race_needs(space_app):
    arena = space_app.arena
    idle(arena)
    url = space_app.local_url
    shipped = playback.shipped(recording.RECORDINGS_DIR)
    longest = max(shipped, key=lambda n: max(s.t for lane in shipped[n].lanes for s in lane.steps))
    runner = Client(url, headers={"X-Forwarded-For": "93.184.216.40"}, verbose=False)
    visitor = Client(url, headers={"X-Forwarded-For": VISITOR}, verbose=False)
    try:
        first = runner.submit(*race_args(prompt=STORY, max_new_tokens=128), api_name="/race")
        wait_for(lambda: arena.admission.state()["running"] == "a race", "the first race to hold the machine")
        # A private event, called by its fn_index through /queue/join, each from its own session and
        # address (as many machines would), each stream kept open.
        codes = []
        for i in range(24):
            session = uuid.uuid4().hex
            code, _ = post(url + "gradio_api/queue/join", {
                "data": [longest], "fn_index": replay_fn_index(space_app), "session_hash": session,
                "event_data": None, "trigger_id": None}, f"93.184.217.{i}")
            codes.append(code)
            if code == 200:
                threading.Thread(target=read_stream, args=(f"{url}gradio_api/queue/data?session_hash={session}",
                                                           f"93.184.217.{i}", []), daemon=True).start()
        assert not first.done()  # the race still runs
        job = visitor.submit(*race_args(max_new_tokens=8), api_name="/race")
        job.result(timeout=HANG_GUARD_S)  # Gradio's "Queue is full" would raise here
        assert 'data-tokens="8"' in job.outputs()[-1][3]
        first.result(timeout=HANG_GUARD_S)
    finally:
        runner.close()
        visitor.close()
    from demo.web.recordings_tab import REPLAY_HANDLERS
    from demo.web.visitors import LANE_WAITING

    assert 200 in codes and set(codes) <= {200, 429}
    assert codes.count(200) <= REPLAY_HANDLERS + LANE_WAITING["replay"], codes


def send_big_body(base_url: str, total: int, declared: bool) -> tuple[int, int]:
    """POST `total` bytes to /gradio_api/call/race, 64 KB at a time (never held in memory), until the
    server answers; (the status it answered, bytes sent by then)."""
    u = urlparse(base_url)
    s = socket.create_connection((u.hostname, u.port), timeout=HANG_GUARD_S)
    length = f"Content-Length: {total}" if declared else "Transfer-Encoding: chunked"
    s.sendall(f"POST /gradio_api/call/race HTTP/1.1\r\nHost: {u.netloc}\r\nContent-Type: application/json\r\n"
              f"X-Forwarded-For: {ATTACKER}\r\n{length}\r\n\r\n".encode())
    chunk, sent = b"x" * 65536, 0
    answer = b""
    try:
        while sent < total and not select.select([s], [], [], 0)[0]:
            s.sendall(chunk if declared else b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sent += len(chunk)
        if not declared and sent >= total:
            s.sendall(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server stopped reading: its answer is waiting to be read
    try:
        while b"\r\n" not in answer:
            got = s.recv(65536)
            if not got:
                break
            answer += got
    except ConnectionResetError:
        pass
    finally:
        s.close()
    assert answer.startswith(b"HTTP/1.1 "), (answer[:100], sent)
    return int(answer.split(b" ")[1]), sent


def test_a_200_mb_body_is_answered_413_while_a_race_keeps_streaming(space_app):
    arena = space_app.arena
    idle(arena)
    racer = Client(space_app.local_url, headers={"X-Forwarded-For": VISITOR}, verbose=False)
    try:
        job = racer.submit(*race_args(prompt=STORY, max_new_tokens=256), api_name="/race")
        wait_for(lambda: any("data-tokens=" in str(o) for o in job.outputs()[-1:]), "tokens to flow")
        before = len(job.outputs())
        total = 200 * 1024 * 1024
        declared = send_big_body(space_app.local_url, total, declared=True)
        streamed = send_big_body(space_app.local_url, total, declared=False)
        assert declared[0] == 413 and streamed[0] == 413, (declared, streamed)
        assert declared[1] < total and streamed[1] < total  # answered long before the body was all sent
        job.result(timeout=HANG_GUARD_S)
        assert len(job.outputs()) > before  # it kept streaming, and finished
        assert 'data-tokens="256"' in job.outputs()[-1][3] or 'data-state="done"' in job.outputs()[-1][3]
    finally:
        racer.close()


def test_callers_without_an_address_hold_at_most_half_the_race_lane_wherever_they_wait(space_app):
    """Raw races from callers with no address key (a Space entry that is not public): their
    handlers are free to start and would wait in the engine's admission, out of Gradio's line;
    the door counts them there too."""
    from demo.web.visitors import LANE_WAITING

    arena = space_app.arena
    idle(arena)
    url = space_app.local_url
    body = {"data": race_args(prompt=STORY, max_new_tokens=8)}
    busy = arena.admission.enter("a test's job")  # the machine is taken: admitted races wait in the engine
    try:
        answers = [post(url + "gradio_api/call/race", body, f"10.0.0.{i}") for i in range(20)]
    finally:
        busy.release()
    accepted = [a for code, a in answers if code == 200]
    refused = {(code, a.get("detail")) for code, a in answers if code != 200}
    assert len(accepted) == (LANE_WAITING["race"] + 1) // 2 + 1, (len(accepted), refused)  # and one may run
    assert refused == {(429, "Too many requests of this kind are waiting; try again in a minute.")}
    streams = []
    for a in accepted:
        lines: list = []
        threading.Thread(target=read_stream, args=(f"{url}gradio_api/call/race/{a['event_id']}", "10.0.0.1", lines),
                         daemon=True).start()
        streams.append(lines)
    for lines in streams:
        wait_for(lambda: any(b"event: complete" in line for line in lines), "an anonymous race to end")
    idle(arena)
