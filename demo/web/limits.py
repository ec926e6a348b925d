"""Work bounded before Gradio accepts it: a small ASGI middleware in front of the whole page.

- Every request body has a size limit (MAX_BODY_BYTES; an upload, MAX_UPLOAD_BODY): a declared
  Content-Length over it is answered 413 before a byte is read, and a body streamed without one
  is counted as it arrives and answered 413 the moment it passes the limit. Gradio reads
  `/gradio_api/call/*` and `/queue/join` bodies whole and parses them on the event loop, so an
  unbounded body (hundreds of MB) froze every page and could get the app killed for memory.
- Uploads (Gradio keeps each on disk for an hour) are bounded in files per request, and in
  number and bytes per visitor and overall over that hour.
- Light events (the queue=False ones: `/gradio_api/run/…`) are rate-limited per visitor, and
  all visitors without a trustworthy address share one bucket.

Visitors are keyed as the queue's door keys them (demo.web.visitors.VisitorIds).
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict, deque
from typing import Callable, Optional

from .files import MAX_UPLOAD_BYTES
from .visitors import VisitorIds

# The largest body the page sends is a race: 16,000 prompt characters, JSON-escaped at up to
# 12 bytes each (an astral character as two \\u escapes), is under 200 KB.
MAX_BODY_BYTES = 1024 * 1024
MAX_UPLOAD_BODY = MAX_UPLOAD_BYTES + 64 * 1024  # one recording and its multipart framing
MAX_FILES_PER_UPLOAD = 2                       # the page uploads one recording at a time
UPLOAD_WINDOW_S = 3600.0                       # Gradio deletes uploads after an hour (delete_cache)
UPLOADS_PER_VISITOR = 20                       # per address in that hour
UPLOAD_BYTES_OVERALL = 128 * 1024 * 1024       # all visitors together in that hour
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
                 clock: Callable[[], float] = time.monotonic):
        self.app = app
        self.ids = visitor_ids or VisitorIds()
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
        address = next((k for k in self.ids.keys_of_scope(scope) if k.startswith("address:")), None)
        if "/run/" in path and not self._light(address):
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
        while True:  # Gradio reads these bodies whole anyway; here they are counted first
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > limit:
                return await refuse(send, 413, too_big(limit))
            if not message.get("more_body", False):
                break
        if upload:
            refusal = self._upload(address, bytes(body), dict(scope.get("headers") or ()).get(b"content-type", b""))
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
                rate, burst = (LIGHT_RATE, LIGHT_BURST) if address else (ANONYMOUS_RATE, ANONYMOUS_BURST)
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
            if address is not None and len(self._uploads.get(address, ())) >= UPLOADS_PER_VISITOR:
                return (f"You have uploaded {UPLOADS_PER_VISITOR} files in the last hour, the most this page "
                        "takes from one visitor; try again in an hour.")
            if sum(n for _, n in self._upload_bytes) + len(body) > UPLOAD_BYTES_OVERALL:
                return "This page has taken all the uploads it can hold this hour; try again in an hour."
            if address is not None:
                self._uploads[address].append(now)
            self._upload_bytes.append((now, len(body)))
        return None


def count_parts(body: bytes, content_type: bytes) -> int:
    """The parts (files and fields) of a multipart body; 0 if it is not one."""
    for piece in content_type.split(b";"):
        name, _, value = piece.strip().partition(b"=")
        if name.lower() == b"boundary" and value:
            delimiter = b"--" + value.strip(b'"')
            return max(0, body.count(delimiter) - 1)  # the last delimiter closes the body
    return 0


def too_big(limit: int) -> str:
    return f"This request is larger than the {limit // 1024:,} KB this page accepts; send less."


async def refuse(send, status: int, sentence: str) -> None:
    """One JSON answer, {"detail": sentence}, as FastAPI's own refusals read; the connection closes,
    so an unread body is never read."""
    body = json.dumps({"detail": sentence}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
