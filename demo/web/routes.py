"""What a stranger may reach at all: the routes the page uses, and what each visitor may hold open.

Gradio mounts far more than this page uses: `process_recording` (an ffmpeg re-encode per
request), `file=https://…` (fetches any public URL), `proxy=…`, `deep_link` (writes a file per
session), run history, monitoring, `api/<name>` (a second door to every handler), login routes.
RouteGuard answers 404 to everything not on ALLOWED before any of it runs, and before Gradio
builds per-session state it checks the `session_hash` a request names (short, plain characters:
Gradio would keep a copy of the page's state for any string, of any length) and how many new
sessions the visitor opens: rotating sessions is how a script would fill that memory.

It also bounds what one visitor holds open at once (event streams included): a script at one
address cannot take the server's file descriptors or a cluster's request slots with idle
streams. Visitors are keyed as the queue's door keys them (demo.web.visitors.VisitorIds); all
visitors without a trustworthy address share one allowance.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import defaultdict, deque
from typing import Callable, Optional
from urllib.parse import parse_qs, unquote

from .visitors import VisitorIds, address_of_scope

# The page's own routes (with the mount's prefix removed): its HTML and assets, the queue
# (join, data, cancel, heartbeat), the API the Python client uses (call/, info, config), uploads
# of recordings, the light events (run/, rate-limited in demo.web.limits) and files it hands out.
ALLOWED_EXACT = frozenset({
    "/", "/config", "/config/", "/favicon.ico", "/manifest.json", "/robots.txt", "/theme.css",
    "/gradio_api/info", "/gradio_api/info/", "/gradio_api/config", "/gradio_api/queue/join",
    "/gradio_api/queue/data", "/gradio_api/cancel", "/gradio_api/upload", "/gradio_api/upload_progress",
    "/gradio_api/startup-events", "/gradio_api/theme.css", "/gradio_api/reset", "/gradio_api/reset/",
})
ALLOWED_PREFIXES = ("/assets/", "/static/", "/svelte/", "/pwa_icon", "/gradio_api/heartbeat/", "/gradio_api/call/",
                    "/gradio_api/run/", "/gradio_api/file=")
# Gradio's browser client makes an 11-character base-36 hash, gradio_client a 36-character UUID.
SESSION_HASH = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_OPEN_PER_VISITOR = 24      # requests and streams one address holds at once (a few tabs' worth)
MAX_OPEN_ANONYMOUS = 256       # all visitors without an address together
NEW_SESSIONS_PER_VISITOR = 30  # sessions one address opens in SESSION_WINDOW_S (a tab is one)
NEW_SESSIONS_ANONYMOUS = 300   # all visitors without an address together
SESSION_WINDOW_S = 600.0
REMEMBERED_SESSIONS = 20_000   # sessions the budget remembers (older ones count as new again)


def allowed(path: str) -> bool:
    if path in ALLOWED_EXACT:
        return True
    if not path.startswith(ALLOWED_PREFIXES):
        return False
    if path.startswith("/gradio_api/file="):  # only the files the page hands out, never a URL to fetch
        target = unquote(path[len("/gradio_api/file="):]).lstrip().lower()
        return not target.startswith(("http:", "https:", "//", "\\\\"))
    return ".." not in path


def session_hash_refusal(session_hash) -> Optional[str]:
    """None if Gradio may see this session hash, else the sentence refusing it."""
    if session_hash is None or (isinstance(session_hash, str) and SESSION_HASH.fullmatch(session_hash)):
        return None
    return "This request names a session this page does not accept; reload the page."


class Sessions:
    """How many sessions each visitor has opened lately: new ones past the budget are refused."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, per_address: int = 1):
        self.clock = clock
        self.per_address = per_address  # visitors one address stands for (VisitorIds.per_address)
        self._lock = threading.Lock()
        self._known: dict[str, float] = {}                       # session hash -> last seen
        self._opened: dict[str, deque] = defaultdict(deque)      # visitor address ("" none) -> times

    def admit(self, session_hash: Optional[str], address: Optional[str]) -> Optional[str]:
        refusal = session_hash_refusal(session_hash)
        if refusal or session_hash is None:
            return refusal
        now = self.clock()
        with self._lock:
            if session_hash in self._known:
                self._known[session_hash] = now
                return None
            opened = self._opened[address or ""]
            while opened and now - opened[0] > SESSION_WINDOW_S:
                opened.popleft()
            if len(opened) >= (NEW_SESSIONS_PER_VISITOR * self.per_address if address else NEW_SESSIONS_ANONYMOUS):
                return "This address has opened more sessions than this page keeps; try again in a few minutes."
            opened.append(now)
            self._known[session_hash] = now
            if len(self._known) > REMEMBERED_SESSIONS:
                self._forget(now)
            return None

    def _forget(self, now: float) -> None:
        self._known = dict(sorted(self._known.items(), key=lambda kv: kv[1])[len(self._known) // 2:])
        for address in [a for a, times in self._opened.items() if not times or now - times[-1] > SESSION_WINDOW_S]:
            del self._opened[address]


class RouteGuard:
    """ASGI middleware in front of the whole page (outside demo.web.limits.BodyLimit)."""

    def __init__(self, app, visitor_ids: Optional[VisitorIds] = None, sessions: Optional[Sessions] = None):
        self.app = app
        self.ids = visitor_ids or VisitorIds()
        self.sessions = sessions or Sessions(per_address=self.ids.per_address)
        self._open: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root):] or "/"
        if not allowed(path):
            return await refuse(send, 404, "Not Found")
        address = address_of_scope(self.ids, scope)
        refusal = self.sessions.admit(_named_session(path, scope), address)
        if refusal:
            return await refuse(send, 429 if "opened" in refusal else 400, refusal)
        key = address or ""
        with self._lock:
            if self._open[key] >= (MAX_OPEN_PER_VISITOR * self.ids.per_address if address else MAX_OPEN_ANONYMOUS):
                full = True
            else:
                full = False
                self._open[key] += 1
        if full:
            return await refuse(send, 429, "This address has too many requests open on this page; "
                                           "close a tab or wait a minute.")
        try:
            return await self.app(scope, receive, send)
        finally:
            with self._lock:
                self._open[key] -= 1
                if not self._open[key]:
                    del self._open[key]

    def open_requests(self) -> dict:
        with self._lock:
            return dict(self._open)


def _named_session(path: str, scope) -> Optional[str]:
    """The session a GET names (the queue's stream, a heartbeat); bodies are read in demo.web.limits."""
    if path.startswith("/gradio_api/heartbeat/"):
        return unquote(path[len("/gradio_api/heartbeat/"):])
    if path == "/gradio_api/queue/data":
        values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("session_hash")
        return values[-1] if values else ""
    return None


async def refuse(send, status: int, sentence: str) -> None:
    """One JSON answer, {"detail": sentence}, as FastAPI's own refusals read; the connection closes,
    so an unread body is never read."""
    body = json.dumps({"detail": sentence}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
