"""Issue 57, as a stranger's script sends it, against both servers of the page: `python app.py`
(Gradio's own server, app.launch) and the cluster's Page (demo.serve.page's ASGI app, here under
uvicorn as Ray's proxy runs it, without Ray). Both are assembled by demo.web.site, launched as
on a Space (SPACE_ID set; each client's address in X-Forwarded-For as the platform sends it).

No model is loaded: every request here is refused or answered before a run, and "a race
running" is the engine's real claim for a visitor, held by the test.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest

from demo.web import routes
from tests.booth_helpers import free_port, running, scratch_cache
from tests.conftest import SMOLLM2
from tests.test_bad_inputs import race_args

STRANGER, VISITOR = "93.184.216.34", "93.184.216.35"
BUSY = "You already have a race running or waiting; wait for it to finish or press Stop."


@pytest.fixture(scope="module", params=["app", "cluster"])
def page(request, session_store, smollm2_ir, tmp_path_factory):
    cache = scratch_cache(session_store, tmp_path_factory.mktemp("guards") / "cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPACE_ID", "tests/arena")
        if request.param == "app":
            with running(cache, warm=False, bench=False) as demo:
                yield demo, demo.local_url, demo.server_app
        else:
            with cluster_page(cache) as served:
                yield served


class cluster_page:
    """The cluster's Page as Ray serves it (build_page + build_asgi), under uvicorn in a thread,
    with the proxy's environment (demo.serve.cluster.LOCAL_ENV: no forwarded-header trust)."""

    def __init__(self, cache):
        self.cache = cache

    def __enter__(self):
        import uvicorn

        from demo.engine.arena import Arena
        from demo.serve.page import build_asgi, build_page

        arena = Arena.create(None, self.cache)
        arena.presets = arena.presets.model_copy(update={"default": SMOLLM2})
        self.demo = build_page(arena)
        port = free_port()
        self.asgi = build_asgi(self.demo)
        self.server = uvicorn.Server(uvicorn.Config(self.asgi, host="127.0.0.1", port=port,
                                                    log_level="warning", forwarded_allow_ips=""))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60  # a hang guard
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "the cluster page did not start"
            time.sleep(0.05)
        return self.demo, f"http://127.0.0.1:{port}/", self.asgi

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(30)


def send(url: str, body=None, address: str = STRANGER, method: str = "POST", headers=()) -> tuple[int, str]:
    data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
    request = urllib.request.Request(url, data=data, method=method if data is not None else "GET",
                                     headers={"Content-Type": "application/json", "X-Forwarded-For": address,
                                              **dict(headers)})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, r.read(4096).decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def detail(text: str) -> str:
    try:
        return json.loads(text).get("detail", "")
    except ValueError:
        return text


def race_index(demo) -> int:
    return next(i for i, fn in demo.fns.items() if fn.api_name == "race")


def join(url: str, demo, session: str, address: str = STRANGER) -> tuple[int, str]:
    return send(url + "gradio_api/queue/join", {"data": race_args(max_new_tokens=8), "fn_index": race_index(demo),
                                                "session_hash": session, "event_data": None, "trigger_id": None},
                address)


# -- one page, assembled in one place ------------------------------------------------------------

def test_both_servers_serve_the_page_with_the_same_door_queue_and_guards(page):
    from demo.web.limits import BodyLimit
    from demo.web.routes import RouteGuard
    from demo.web.site import MAX_QUEUE, session_capacity

    demo, _, server = page
    assert demo._queue.push.__qualname__.startswith("QueueDoor.install"), "the queue door is not installed"
    assert demo.api_open is False and demo._queue.max_size == MAX_QUEUE
    assert demo.state_session_capacity == session_capacity() <= 10_000
    assert demo.state_holder.capacity == session_capacity()
    guards = [m.cls for m in server.user_middleware if m.cls in (RouteGuard, BodyLimit)]
    assert guards == [RouteGuard, BodyLimit], [m.cls for m in server.user_middleware]


# -- routes the page does not use ----------------------------------------------------------------

@pytest.mark.parametrize("method,path", [
    ("POST", "gradio_api/process_recording"),        # an ffmpeg re-encode per request
    ("GET", "gradio_api/file=https://example.com/x"),  # fetches any public URL
    ("GET", "gradio_api/file=//example.com/x"),
    ("GET", "gradio_api/deep_link?session_hash=abc"),   # writes a file per session
    ("GET", "gradio_api/api/race"), ("POST", "gradio_api/api/race"),  # a second door to every handler
    ("GET", "monitoring"), ("GET", "run-history/buckets"), ("GET", "openapi.json"),
    ("GET", "gradio_api/proxy=https://example.com/x"), ("GET", "proxy=https://example.com/x"),
    ("POST", "gradio_api/vibe-code"), ("GET", "gradio_api/profiling/traces"), ("GET", "login"),
])
def test_a_route_the_page_does_not_use_answers_404_before_any_work(page, method, path):
    demo, url, _ = page
    sessions = len(demo.state_holder.session_data)
    code, text = send(url + path, b"{}" if method == "POST" else None, method=method)
    assert code == 404, (code, text[:200])
    assert len(demo.state_holder.session_data) == sessions


def test_a_queued_event_cannot_skip_the_queue_through_run(page):
    demo, url, _ = page
    code, text = send(url + "gradio_api/run/race", {"data": race_args(max_new_tokens=8)})
    assert code != 200 and "queue" in text.lower(), (code, text[:200])
    assert demo.arena.admission.state() == {"running": None, "waiting": 0}


def test_the_page_itself_still_loads(page):
    _, url, _ = page
    for path in ("", "config", "gradio_api/info"):
        code, text = send(url + path, address=VISITOR)
        assert code == 200, (path, code, text[:200])


# -- nothing kept for a refused request ----------------------------------------------------------

def test_a_900_kb_session_hash_is_refused_and_nothing_is_kept(page):
    demo, url, _ = page
    sessions = len(demo.state_holder.session_data)
    code, text = join(url, demo, "a" * 900_000)
    assert code == 400 and detail(text) == routes.session_hash_refusal("x" * 65), (code, text[:200])
    code, _ = send(url + "gradio_api/heartbeat/" + "b" * 5000, None, method="GET")
    assert code == 400
    assert len(demo.state_holder.session_data) == sessions


def test_races_the_door_refuses_keep_no_session_state_and_rotating_sessions_run_out(page):
    demo, url, _ = page
    admission = demo.arena.admission
    claim = admission.claim("a race", ("address:" + STRANGER,))  # the stranger's race, running
    try:
        sessions = len(demo.state_holder.session_data)
        answers = [join(url, demo, uuid.uuid4().hex) for _ in range(routes.NEW_SESSIONS_PER_VISITOR + 5)]
        refused_busy = [a for a in answers if a[0] == 429 and detail(a[1]) == BUSY]
        out_of_sessions = [a for a in answers if a[0] == 429 and "opened more sessions" in detail(a[1])]
        assert len(refused_busy) == routes.NEW_SESSIONS_PER_VISITOR and len(out_of_sessions) == 5, answers[-3:]
        assert len(demo.state_holder.session_data) == sessions  # Gradio built no state for any of them
    finally:
        claim.release()


# -- bounds on what one address holds open -------------------------------------------------------

def open_stream(url: str, path: str, address: str) -> tuple[int, socket.socket]:
    """A raw GET held open (an idle heartbeat stream): its status, and the socket to close."""
    host, port = url.split("//")[1].rstrip("/").split(":")
    s = socket.create_connection((host, int(port)), timeout=30)
    s.sendall(f"GET /{path} HTTP/1.1\r\nHost: {host}\r\nX-Forwarded-For: {address}\r\n\r\n".encode())
    status = int(s.recv(64).split(b" ")[1])
    return status, s


def test_one_address_cannot_hold_more_than_its_share_of_open_streams(page):
    _, url, _ = page
    held = []
    tab = uuid.uuid4().hex[:11]
    try:
        codes = []
        for _ in range(routes.MAX_OPEN_PER_VISITOR + 20):
            code, s = open_stream(url, f"gradio_api/heartbeat/{tab}", "93.184.216.50")
            codes.append(code)
            held.append(s)
        assert codes.count(200) == routes.MAX_OPEN_PER_VISITOR and codes.count(429) == 20, codes
        code, s = open_stream(url, f"gradio_api/heartbeat/{uuid.uuid4().hex[:11]}", VISITOR)
        held.append(s)
        assert code == 200  # another visitor still gets in
    finally:
        for s in held:
            s.close()


# -- one trusted address -------------------------------------------------------------------------

def test_a_forged_forwarded_header_from_a_loopback_peer_names_nobody(session_store, smollm2_ir, tmp_path, monkeypatch):
    """Off a Space, without --trust-forwarded-for: uvicorn would rewrite a loopback peer's
    address from X-Forwarded-For (its default trusts 127.0.0.1), so each request of a script
    behind a local tunnel could name its own address. Here all of them are the one anonymous
    caller: 30 streams "from" one forged address pass the per-address bound (24), because that
    address is never believed."""
    monkeypatch.delenv("SPACE_ID", raising=False)
    monkeypatch.delenv("FORWARDED_ALLOW_IPS", raising=False)
    cache = scratch_cache(session_store, tmp_path / "cache")
    with running(cache, warm=False, bench=False) as demo:
        held = []
        tab = uuid.uuid4().hex[:11]
        try:
            codes = []
            for _ in range(routes.MAX_OPEN_PER_VISITOR + 6):
                code, s = open_stream(demo.local_url, f"gradio_api/heartbeat/{tab}", STRANGER)
                codes.append(code)
                held.append(s)
            assert codes == [200] * len(codes), codes
        finally:
            for s in held:
                s.close()


# -- one visitor's share of a lane ---------------------------------------------------------------

def test_csv_exports_from_rotating_sessions_take_one_place_and_another_visitor_still_exports(page, monkeypatch):
    """The export lane holds 2 waiting; before, one address rotating its session took both and
    every other visitor's export was refused; now it holds one besides its running one. The export is held running (its handler blocks)
    so what waits behind it can be counted."""
    demo, url, _ = page
    index = next(i for i, fn in demo.fns.items() if getattr(fn.fn, "__name__", None) == "export_csv")
    held, entered = threading.Event(), threading.Event()

    def export_csv(*args):
        entered.set()
        held.wait(60)
        return None

    monkeypatch.setattr(demo.fns[index], "fn", export_csv)

    def export(address: str) -> tuple[int, str]:
        return send(url + "gradio_api/queue/join", {"data": [], "fn_index": index, "session_hash": uuid.uuid4().hex,
                                                    "event_data": None, "trigger_id": None}, address)

    try:
        first = export("93.184.216.60")
        assert first[0] == 200, first
        assert entered.wait(30)
        again = [export("93.184.216.60") for _ in range(3)]  # one may wait behind its running one
        assert [(code, detail(text)) for code, text in again][1:] == [
            (429, "You already have requests of this kind waiting; wait for them to finish.")] * 2
        assert again[0][0] == 200
        assert export(VISITOR)[0] == 200  # another visitor's export takes the lane's other place in line
    finally:
        held.set()
