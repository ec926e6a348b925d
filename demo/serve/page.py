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


def build_page(arena, kiosk: bool = False, idle_seconds: float = 45.0, keep_prompts: bool = False,
               trust_forwarded_for: bool = False, visitors_per_address: int = 1):
    """The arena's page over `arena` (a Backend: an Arena or a RemoteArena), assembled where
    `python app.py` assembles its own (demo.web.site), with the same door, queue and limits. The
    Benchmark tab is left out: it measures one machine, not a cluster."""
    from ..web import site
    from ..web.booth import Booth
    from ..web.visitors import VisitorIds

    booth = Booth(kiosk=kiosk, idle_seconds=idle_seconds, keep_prompts=keep_prompts)
    ids = VisitorIds.from_environment(trust_forwarded_for, visitors_per_address)
    return site.assemble(arena, booth, ids, bench_enabled=False)


def build_asgi(demo):
    """FastAPI app with the page at `/`, behind the same guards as app.launch's, and the session
    cookie for sticky routing."""
    import gradio as gr
    from fastapi import FastAPI, Request

    from ..web import site

    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None, middleware=site.guards(demo))

    @app.middleware("http")
    async def session_cookie(request: Request, call_next):
        response = await call_next(request)
        if SESSION_COOKIE not in request.cookies:
            response.set_cookie(SESSION_COOKIE, secrets.token_urlsafe(16), httponly=True, samesite="lax")
        return response

    return gr.mount_gradio_app(app, demo, path="/", **site.serving_options(demo))
