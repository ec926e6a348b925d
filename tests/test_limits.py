"""Work bounded before Gradio accepts it (demo.web.limits.BodyLimit), on a stand-in ASGI app:
body sizes answered 413 before they are read whole, uploads bounded per request, per visitor
and overall, light events rate-limited per visitor. tests/test_strangers_load.py sends a
200 MB body to the real page."""

from __future__ import annotations

import time

import asyncio
import json

from demo.web import limits
from demo.web.limits import BodyLimit
from demo.web.visitors import VisitorIds


class Inner:
    """The app behind the limit: records what reached it."""

    def __init__(self):
        self.bodies: list = []

    async def __call__(self, scope, receive, send):
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.bodies.append(body)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def call(app, path: str, chunks=(b"",), headers=(), method="POST", client="10.16.3.80"):
    """Drive one request through the ASGI app; returns (status, detail, chunks it read)."""
    scope = {"type": "http", "method": method, "path": path, "client": (client, 1234),
             "headers": [(k.lower().encode(), v.encode()) for k, v in headers]}
    pending = list(chunks)
    read = []
    sent: list = []

    async def receive():
        if not pending:
            return {"type": "http.disconnect"}
        chunk = pending.pop(0)
        read.append(chunk)
        return {"type": "http.request", "body": chunk, "more_body": bool(pending)}

    async def send(message):
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    status = sent[0]["status"]
    body = b"".join(m.get("body", b"") for m in sent[1:])
    detail = json.loads(body)["detail"] if status != 200 else None
    return status, detail, len(read)


def space() -> VisitorIds:
    return VisitorIds(on_space=True)


def test_a_declared_oversized_body_is_refused_before_a_byte_is_read():
    inner = Inner()
    app = BodyLimit(inner, space())
    endless = (b"x" * 65536 for _ in range(3200))  # 200 MB, never read
    status, detail, read = call(app, "/gradio_api/call/race", endless,
                                headers=[("Content-Length", str(200 * 1024 * 1024))])
    assert status == 413 and read == 0 and inner.bodies == []
    assert detail == "This request is larger than the 1,024 KB this page accepts; send less."
    assert call(app, "/gradio_api/queue/join", [b"{}"], headers=[("Content-Length", "nonsense")])[0] == 413


def test_a_streamed_body_without_a_length_is_counted_and_cut_at_the_limit():
    inner = Inner()
    app = BodyLimit(inner, space())
    chunk = b"x" * 65536
    status, _, read = call(app, "/gradio_api/queue/join", [chunk] * 3200)
    assert status == 413 and read == limits.MAX_BODY_BYTES // len(chunk) + 1  # one chunk past the limit
    assert inner.bodies == []
    # A body under the limit reaches the app whole, in one piece.
    assert call(app, "/gradio_api/queue/join", [b'{"data":', b" [1]}"])[0] == 200
    assert inner.bodies == [b'{"data": [1]}']


def multipart(files: int, size: int = 10) -> tuple[list, list]:
    parts = b"".join(b"--B\r\nContent-Disposition: form-data; name=\"files\"; filename=\"r.json\"\r\n\r\n"
                     + b"{" * size + b"\r\n" for _ in range(files)) + b"--B--\r\n"
    return [parts], [("Content-Type", "multipart/form-data; boundary=B"), ("Content-Length", str(len(parts)))]


def test_uploads_are_bounded_per_request_per_visitor_and_overall(monkeypatch):
    inner = Inner()
    app = BodyLimit(inner, space())
    body, headers = multipart(3)
    status, detail, _ = call(app, "/gradio_api/upload", body, headers + [("X-Forwarded-For", "93.184.216.34")])
    assert (status, detail) == (413, "An upload may hold at most 2 files; choose one recording.")
    one, headers = multipart(1)
    stranger = headers + [("X-Forwarded-For", "93.184.216.34")]
    for _ in range(limits.UPLOADS_PER_VISITOR):
        assert call(app, "/gradio_api/upload", one, stranger)[0] == 200
    status, detail, _ = call(app, "/gradio_api/upload", one, stranger)
    assert status == 429 and detail.startswith(f"You have uploaded {limits.UPLOADS_PER_VISITOR} files in the last hour")
    # Another visitor still uploads; an address rotated by the client itself changes nothing.
    assert call(app, "/gradio_api/upload", one, headers + [("X-Forwarded-For", "93.184.216.35")])[0] == 200
    assert call(app, "/gradio_api/upload", one, headers + [("X-Forwarded-For", "6.6.6.6, 93.184.216.34")])[0] == 429
    # Overall: bytes of everyone's uploads in the hour.
    monkeypatch.setattr(limits, "UPLOAD_BYTES_OVERALL", 5000)
    big, headers = multipart(1, size=4000)
    assert call(app, "/gradio_api/upload", big, headers + [("X-Forwarded-For", "93.184.216.36")])[0] == 429
    # An hour later the quota is free again.
    an_hour_on = time.monotonic() + 3601  # the quotas count on the monotonic clock, whatever the uptime
    later = BodyLimit(inner, space(), clock=lambda: an_hour_on)
    later._uploads, later._upload_bytes = app._uploads, app._upload_bytes
    monkeypatch.setattr(limits, "UPLOAD_BYTES_OVERALL", 128 * 1024 * 1024)
    assert call(later, "/gradio_api/upload", one, stranger)[0] == 200


def test_light_events_are_rate_limited_per_visitor():
    inner = Inner()
    now = [0.0]
    app = BodyLimit(inner, space(), clock=lambda: now[0])
    hog = [("X-Forwarded-For", "93.184.216.34")]
    answers = [call(app, "/gradio_api/run/predict", [b"{}"], hog)[0] for _ in range(100)]
    assert answers.count(200) == limits.LIGHT_BURST and set(answers) == {200, 429}
    # Another visitor is not slowed by the first; the first gets tokens back as time passes.
    assert call(app, "/gradio_api/run/predict", [b"{}"], [("X-Forwarded-For", "93.184.216.35")])[0] == 200
    now[0] += 1.0
    answers = [call(app, "/gradio_api/run/predict", [b"{}"], hog)[0] for _ in range(20)]
    assert answers.count(200) == limits.LIGHT_RATE
    # GETs (the page, its assets, event streams) are never limited here.
    assert call(app, "/", [b""], hog, method="GET")[0] == 200


def test_an_upload_naming_two_boundaries_counts_the_parts_of_the_one_gradio_reads():
    # Gradio's parser takes the last `boundary=`; a body split by it passes no more files
    # because the first one names a delimiter the body never holds.
    body, _ = multipart(1000)
    headers = [("Content-Type", "multipart/form-data; boundary=A; boundary=B"), ("Content-Length", str(len(body[0]))),
               ("X-Forwarded-For", "93.184.216.34")]
    status, detail, _ = call(BodyLimit(Inner(), space()), "/gradio_api/upload", body, headers)
    assert (status, detail) == (413, "An upload may hold at most 2 files; choose one recording.")
    # The same split over two Content-Type headers.
    headers = [("Content-Type", "multipart/form-data; boundary=A"), ("Content-Type", "multipart/form-data; boundary=B"),
               ("X-Forwarded-For", "93.184.216.34")]
    assert call(BodyLimit(Inner(), space()), "/gradio_api/upload", body, headers)[0] == 413


def test_uploads_without_an_address_share_one_quota():
    app = BodyLimit(Inner(), space())
    one, headers = multipart(1)
    anonymous = headers + [("X-Forwarded-For", "10.0.0.7")]  # no public address: nobody in particular
    answers = [call(app, "/gradio_api/upload", one, anonymous)[0] for _ in range(limits.UPLOADS_ANONYMOUS + 3)]
    assert answers.count(200) == limits.UPLOADS_ANONYMOUS and answers[-3:] == [429] * 3


def test_a_body_that_trickles_is_cut_at_its_deadline(monkeypatch):
    monkeypatch.setattr(limits, "BODY_DEADLINE_S", 0.3)
    inner = Inner()
    app = BodyLimit(inner, space())
    scope = {"type": "http", "method": "POST", "path": "/gradio_api/queue/join", "client": ("10.16.3.80", 1),
             "headers": [(b"x-forwarded-for", b"93.184.216.34")]}
    sent: list = []

    async def one_byte_a_second():
        await asyncio.sleep(1.0)
        return {"type": "http.request", "body": b"{", "more_body": True}

    async def send(message):
        sent.append(message)

    asyncio.run(app(scope, one_byte_a_second, send))
    assert sent[0]["status"] == 408 and inner.bodies == []


def test_every_path_that_runs_a_handler_is_rate_limited_and_its_session_checked():
    now = [0.0]
    app = BodyLimit(Inner(), space(), clock=lambda: now[0])
    hog = [("X-Forwarded-For", "93.184.216.34")]
    for path in ("/gradio_api/call/race", "/gradio_api/queue/join", "/gradio_api/run/predict"):
        now[0] += 1000.0  # a full bucket for each path
        answers = [call(app, path, [b"{}"], hog)[0] for _ in range(int(limits.LIGHT_BURST) + 10)]
        assert answers.count(200) == limits.LIGHT_BURST, (path, answers)
    now[0] += 1000.0
    long_session = json.dumps({"data": [], "session_hash": "x" * 65}).encode()
    status, detail, _ = call(app, "/gradio_api/queue/join", [long_session], hog)
    assert status == 400 and detail == "This request names a session this page does not accept; reload the page."
    assert call(app, "/gradio_api/queue/join", [json.dumps({"session_hash": "ab12_-Z"}).encode()], hog)[0] == 200
