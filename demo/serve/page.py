"""The page as a FastAPI app for the cluster's ingress: the same page as `python app.py`.

Ray's own GradioServer/GradioIngress does not work with gradio 6.31 (500 on `/`, the queue
hangs), so the page is mounted with `gr.mount_gradio_app` on a FastAPI app that Ray Serve
serves (`@serve.ingress`).

Sticky sessions: Gradio keeps its queue in one process, so with several page replicas every
request of one browser must reach the same replica. A middleware gives each browser a
session cookie; the cluster's proxy, started with RAY_SERVE_SESSION_ID_HEADER_KEY=cookie,
uses the Cookie header as the session id, and the Page deployment's ConsistentHashRouter
maps a session id to one replica (serve.yaml). One replica needs none of it.
"""

from __future__ import annotations

import secrets

SESSION_COOKIE = "arena_session"
MAX_QUEUE = 16  # as app.py: races and benchmarks waiting in Gradio's queue, per page replica


def build_page(arena, kiosk: bool = False, idle_seconds: float = 45.0, keep_prompts: bool = False):
    """The arena's Gradio Blocks over `arena` (a Backend: an Arena or a RemoteArena), queued as app.py does.
    The Benchmark tab is left out: it measures one machine, not a cluster."""
    from ..web.booth import Booth
    from ..web.ui import build_demo

    booth = Booth(kiosk=kiosk, idle_seconds=idle_seconds, keep_prompts=keep_prompts)
    return build_demo(arena, bench_enabled=False, booth=booth).queue(default_concurrency_limit=1,
                                                                     max_size=MAX_QUEUE)


def build_asgi(demo):
    """FastAPI app with the page at `/` and the session cookie for sticky routing."""
    import gradio as gr
    from fastapi import FastAPI, Request

    from ..web.files import MAX_UPLOAD_BYTES
    from ..web.render import CSS
    from ..web.style import CSS as BOOTH_CSS
    from ..web.ui import THEME

    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    @app.middleware("http")
    async def session_cookie(request: Request, call_next):
        response = await call_next(request)
        if SESSION_COOKIE not in request.cookies:
            response.set_cookie(SESSION_COOKIE, secrets.token_urlsafe(16), httponly=True, samesite="lax")
        return response

    return gr.mount_gradio_app(app, demo, path="/", theme=THEME, css=CSS + BOOTH_CSS, show_error=False,
                               max_file_size=MAX_UPLOAD_BYTES)  # as app.launch: uploads are only recordings
