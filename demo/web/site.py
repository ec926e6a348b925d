"""The page as strangers reach it, assembled in one place for every server that serves it:
`python app.py` (Gradio's own server) and the cluster's Page deployment (demo.serve.page).

What makes the page safe to serve lives here and nowhere else:
- the queue door (demo.web.visitors.QueueDoor): one job per visitor, bounded lanes;
- the queue itself: one line of MAX_QUEUE events, and no REST shortcut past it (api_open=False:
  `/run/<queued event>` is refused, so every heavy event passes the door);
- the ASGI guards in front of everything (`guards`): the route allow-list, session and connection
  bounds (demo.web.routes), body sizes, body deadlines, rate limits and upload quotas
  (demo.web.limits);
- the serving options (`serving_options`): no error details to the browser, uploads capped, a
  session store sized for this machine;
- one trusted address (`distrust_forwarded_headers`): uvicorn believes no X-Forwarded-For of its
  own; demo.web.visitors decides, by the launch's one rule, whose address a request carries.
"""

from __future__ import annotations

import os
import resource

from starlette.middleware import Middleware

from ..engine.backend import Backend
from .booth import Booth
from .files import MAX_UPLOAD_BYTES
from .limits import BodyLimit
from .render import CSS
from .routes import RouteGuard, Sessions
from .style import CSS as BOOTH_CSS
from .ui import THEME, build_demo
from .visitors import QueueDoor, VisitorIds

# Gradio's one line for every queued event: races, chat turns, three-way races, replays, benchmarks
# and CSV exports (light events skip it). Each lane may fill only its share of it
# (demo.web.visitors.LANE_WAITING, whose sum stays below this). The engine runs one job at a time.
MAX_QUEUE = 16
# Gradio keeps a copy of the page's state per session (about 1 MB for this page), 10,000 by
# default: bounded here by the machine's memory (1/32 of it), and never above Gradio's default.
SESSION_BYTES = 1024 * 1024
OPEN_FILES_WANTED = 8192  # streams and connections; a booth laptop's default soft limit is 1,024


def assemble(arena: Backend, booth: Booth, ids: VisitorIds, bench_enabled: bool = False):
    """The page over `arena` with its door installed and its queue bounded (a gr.Blocks)."""
    door = QueueDoor(ids, arena.admission)
    demo = build_demo(arena, bench_enabled=bench_enabled, booth=booth, door=door).queue(
        default_concurrency_limit=1, max_size=MAX_QUEUE, api_open=False)
    door.install(demo)
    demo.arena = arena  # for tools that drive the engine next to the page (lab.app_overhead, tests)
    demo.door = door
    demo.visitor_ids = ids  # the guards key visitors the same way (guards(demo))
    demo.state_session_capacity = session_capacity()
    return demo


def guards(demo) -> list:
    """The ASGI middleware every server puts in front of the page, outermost first."""
    sessions = Sessions(per_address=demo.visitor_ids.per_address)
    return [Middleware(RouteGuard, visitor_ids=demo.visitor_ids, sessions=sessions),
            Middleware(BodyLimit, visitor_ids=demo.visitor_ids, sessions=sessions)]


def serving_options(demo) -> dict:
    """What both gr.Blocks.launch and gr.mount_gradio_app take: theme and CSS, no error details
    (a crash's text stays in the server log), uploads capped (the page takes only recordings),
    and no Node front end (it would hide the peer's address and bypass the guards)."""
    return dict(theme=THEME, css=CSS + BOOTH_CSS, show_error=False, max_file_size=MAX_UPLOAD_BYTES, ssr_mode=False)


def session_capacity(memory_bytes: int | None = None) -> int:
    if memory_bytes is None:
        memory_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return max(100, min(10_000, memory_bytes // 32 // SESSION_BYTES))


def distrust_forwarded_headers() -> None:
    """uvicorn (Gradio's server) rewrites a loopback peer's address from X-Forwarded-For before any
    guard reads it, so behind a local tunnel each request could name its own address. Turn that
    off for the server this process starts: the visitor rule (demo.web.visitors) reads the header
    itself, where the launch says a proxy writes it."""
    os.environ["FORWARDED_ALLOW_IPS"] = ""


def raise_open_files_limit() -> int:
    """Open as many connections as the system lets this process (the soft limit up to the hard one)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = OPEN_FILES_WANTED if hard == resource.RLIM_INFINITY else min(hard, OPEN_FILES_WANTED)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        return wanted
    return soft
