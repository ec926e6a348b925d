"""Work bounded before Gradio accepts it: a small ASGI middleware in front of the whole page.

- Every request body has a size limit (MAX_BODY_BYTES; an upload, MAX_UPLOAD_BODY): a declared
  Content-Length over it is answered 413 before a byte is read, and a body streamed without one
  is counted as it arrives and answered 413 the moment it passes the limit. Gradio reads
  `/gradio_api/call/*` and `/queue/join` bodies whole and parses them on the event loop, so an
  unbounded body (hundreds of MB) froze every page and could get the app killed for memory.
- Uploads (Gradio keeps each on disk for an hour) are bounded in files per request, and in
  number and bytes per visitor and overall over that hour.
- A body must arrive within BODY_DEADLINE_S (an upload, UPLOAD_DEADLINE_S): a client that
  trickles one byte a second holds no connection for long.
- Every request that executes something (`run/…`, `call/…`, `queue/join`) is rate-limited per
  visitor, and all visitors without a trustworthy address share one bucket; the session a
  body names is checked (demo.web.routes.Sessions) before Gradio builds state for it.

Visitors are keyed as the queue's door keys them (demo.web.visitors.VisitorIds).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import defaultdict, deque
from typing import Callable, Optional

from .files import MAX_UPLOAD_BYTES
from .routes import Sessions, refuse
from .visitors import VisitorIds, address_of_scope

# The largest body the page sends is a race: 16,000 prompt characters, JSON-escaped at up to
# 12 bytes each (an astral character as two \\u escapes), is under 200 KB.
MAX_BODY_BYTES = 1024 * 1024
MAX_UPLOAD_BODY = MAX_UPLOAD_BYTES + 64 * 1024  # one recording and its multipart framing
MAX_FILES_PER_UPLOAD = 2                       # the page uploads one recording at a time
UPLOAD_WINDOW_S = 3600.0                       # Gradio deletes uploads after an hour (delete_cache)
UPLOADS_PER_VISITOR = 20                       # per address in that hour
UPLOADS_ANONYMOUS = 60                         # all visitors without an address together, that hour
UPLOAD_BYTES_OVERALL = 128 * 1024 * 1024       # all visitors together in that hour
BODY_DEADLINE_S = 20.0                         # a race's body is under 200 KB
UPLOAD_DEADLINE_S = 120.0                      # a recording (MAX_UPLOAD_BYTES) over a slow line
EXECUTING = ("/run/", "/call/", "/queue/join")  # paths whose requests run a handler
LIGHT_RATE, LIGHT_BURST = 10.0, 40.0           # per visitor: requests a second, and a burst
ANONYMOUS_RATE, ANONYMOUS_BURST = 40.0, 120.0  # everyone without an address, together


class Bucket:
    """A token bucket: `rate` a second, at most `burst` saved up."""

    def __init__(self, rate: float, burst: float, now: float):
        self.rate, self.burst, self.tokens, self.t = rate, burst, burst, now

    def take(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.t) * self.rate)
        self.t = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


class BodyLimit:
    def __init__(self, app, visitor_ids: Optional[VisitorIds] = None, max_body: int = MAX_BODY_BYTES,
                 clock: Callable[[], float] = time.monotonic, sessions: Optional[Sessions] = None):
        self.app = app
        self.ids = visitor_ids or VisitorIds()
        self.sessions = sessions or Sessions(clock, self.ids.per_address)
        self.max_body = max_body
        self.clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, Bucket] = {}
        self._uploads: dict[str, deque] = defaultdict(deque)  # address -> upload times
        self._upload_bytes: deque = deque()                    # (time, bytes), all visitors

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        address = address_of_scope(self.ids, scope)
        executes = any(p in path for p in EXECUTING) and scope.get("method") == "POST"
        if executes and not self._light(address):
            return await refuse(send, 429, "This page is getting requests faster than it can answer; "
                                           "wait a few seconds and try again.")
        if scope.get("method") not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        upload = path.rstrip("/").endswith("/upload")
        limit = MAX_UPLOAD_BODY if upload else self.max_body
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            return await refuse(send, 413, too_big(limit))
        body = bytearray()
        deadline = self.clock() + (UPLOAD_DEADLINE_S if upload else BODY_DEADLINE_S)
        while True:  # Gradio reads these bodies whole anyway; here they are counted first
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - self.clock()))
            except asyncio.TimeoutError:
                return await refuse(send, 408, "This request's body came too slowly; send it again.")
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > limit:
                return await refuse(send, 413, too_big(limit))
            if not message.get("more_body", False):
                break
        if executes:
            refusal = self.sessions.admit(session_in(bytes(body)), address)
            if refusal:
                return await refuse(send, 429 if "opened" in refusal else 400, refusal)
        if upload:
            content_types = b";".join(v for k, v in scope.get("headers") or () if k.lower() == b"content-type")
            refusal = self._upload(address, bytes(body), content_types)
            if refusal:
                return await refuse(send, 429 if "hour" in refusal else 413, refusal)
        delivered = False

        async def replay():
            nonlocal delivered
            if delivered:
                return await receive()
            delivered = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        return await self.app(scope, replay, send)

    def _light(self, address: Optional[str]) -> bool:
        now = self.clock()
        with self._lock:
            bucket = self._buckets.get(address or "")
            if bucket is None:
                if len(self._buckets) > 10_000:  # forget idle visitors: their buckets are full again anyway
                    self._buckets = {k: b for k, b in self._buckets.items() if now - b.t < 60}
                share = self.ids.per_address
                rate, burst = (LIGHT_RATE * share, LIGHT_BURST * share) if address else (ANONYMOUS_RATE, ANONYMOUS_BURST)
                bucket = self._buckets[address or ""] = Bucket(rate, burst, now)
            return bucket.take(now)

    def _upload(self, address: Optional[str], body: bytes, content_type: bytes) -> Optional[str]:
        """None if this upload may go on (and it is counted), else the sentence refusing it."""
        files = count_parts(body, content_type)
        if files > MAX_FILES_PER_UPLOAD:
            return f"An upload may hold at most {MAX_FILES_PER_UPLOAD} files; choose one recording."
        now = self.clock()
        with self._lock:
            while self._upload_bytes and now - self._upload_bytes[0][0] > UPLOAD_WINDOW_S:
                self._upload_bytes.popleft()
            for key in list(self._uploads):
                times = self._uploads[key]
                while times and now - times[0] > UPLOAD_WINDOW_S:
                    times.popleft()
                if not times:
                    del self._uploads[key]
            cap = UPLOADS_PER_VISITOR * self.ids.per_address if address is not None else UPLOADS_ANONYMOUS
            if len(self._uploads.get(address or "", ())) >= cap:
                return (f"You have uploaded {cap} files in the last hour, the most this page "
                        "takes from one visitor; try again in an hour.")
            if sum(n for _, n in self._upload_bytes) + len(body) > UPLOAD_BYTES_OVERALL:
                return "This page has taken all the uploads it can hold this hour; try again in an hour."
            self._uploads[address or ""].append(now)
            self._upload_bytes.append((now, len(body)))
        return None


def session_in(body: bytes):
    """The `session_hash` a JSON body names (None if it names none or is not a JSON object:
    Gradio answers those itself)."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    return parsed.get("session_hash") if isinstance(parsed, dict) else None


def count_parts(body: bytes, content_type: bytes) -> int:
    """The parts (files and fields) of a multipart body; 0 if it is not one. The boundary is
    the *last* `boundary=` parameter, as Gradio's multipart parser reads it; a body holding a
    different delimiter than that counts every part either could mean."""
    boundaries = []
    for piece in content_type.split(b";"):
        name, _, value = piece.strip().partition(b"=")
        if name.strip().lower() == b"boundary" and value.strip().strip(b'"'):
            boundaries.append(value.strip().strip(b'"'))
    if not boundaries:
        return 0
    return max(max(0, body.count(b"--" + b) - 1) for b in boundaries)  # the last delimiter closes the body


def too_big(limit: int) -> str:
    return f"This request is larger than the {limit // 1024:,} KB this page accepts; send less."
