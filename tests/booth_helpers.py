"""Helpers for the booth tests (kiosk, scoreboard, recordings, three-way race) in a real browser.

Each test module starts its own page on a scratch cache folder whose `models` is the
session's prepared SmolLM2 fixture (a symlink), so the scoreboard database it writes is
its own and a restart (a second make_demo on the same folder) can be checked exactly.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
from pathlib import Path

from .conftest import SMOLLM2, has_module, require

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def require_browser() -> None:
    require(Path(CHROMIUM).exists(), f"Debian's chromium at {CHROMIUM} (sudo apt-get install chromium chromium-driver)")
    require(has_module("playwright"), "the playwright Python package (pip install -r requirements-test.txt)")


def scratch_cache(session_store, folder: Path) -> Path:
    """A cache folder of its own that shares the session's prepared models."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("models", "calibration", "safety"):  # safety: the configurations proven on this machine
        shared = Path(session_store.cache_dir) / name
        if name == "safety":
            shared.mkdir(parents=True, exist_ok=True)
        if shared.exists() and not (folder / name).exists():
            (folder / name).symlink_to(shared.resolve(), target_is_directory=True)
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running(cache_dir: Path, **kwargs):
    """The real page (app.make_demo) on 127.0.0.1 with the SmolLM2 preset."""
    import app

    demo = app.make_demo(preset=SMOLLM2, cache_dir=cache_dir, **kwargs)
    app.launch(demo, port=free_port(), prevent_thread_lock=True, quiet=True)
    try:
        yield demo
    finally:
        demo.close()


@contextlib.contextmanager
def browser_page(url: str, viewport=(1400, 1300)):
    from playwright import sync_api

    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]}, accept_downloads=True)
        page = context.new_page()
        page.dialogs = []
        page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
        page.goto(url)
        page.wait_for_selector("#run", timeout=30_000)
        try:
            yield page
        finally:
            context.close()
            browser.close()


@contextlib.contextmanager
def another_page(page, url: str, viewport=(1400, 1300)):
    """A second page in the same browser (Playwright's sync API cannot be started twice)."""
    context = page.context.browser.new_context(viewport={"width": viewport[0], "height": viewport[1]},
                                               accept_downloads=True)
    other = context.new_page()
    other.dialogs = []
    other.on("dialog", lambda d: (other.dialogs.append(d.message), d.dismiss()))
    other.goto(url)
    other.wait_for_selector("#run", timeout=30_000)
    try:
        yield other
    finally:
        context.close()


def wait_ready(page) -> None:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function("() => document.querySelector('#startup')?.innerText.includes('Ready')",
                               timeout=180_000)
    except PlaywrightTimeout:  # say what the page said instead
        raise AssertionError(f"the page never said Ready; its startup line: {page.inner_text('#startup')!r}") from None


def open_tab(page, label: str) -> None:
    page.locator("button[role=tab]", has_text=label).first.click()


def set_slider(page, elem_id: str, value) -> None:
    """Type into a slider's number box; retry, since a re-render can swallow the first try."""
    box = page.locator(f"#{elem_id} input[type=number]")
    check = f"() => document.querySelector('#{elem_id} input[type=range]').value == '{value}'"
    for _ in range(3):
        box.fill(str(value))
        box.press("Tab")
        try:
            page.wait_for_function(check, timeout=3_000)
            return
        except Exception:
            continue
    raise AssertionError(f"could not set {elem_id} to {value}")


def toasts(page) -> list:
    return page.evaluate("() => [...document.querySelectorAll('[data-testid=toast-body]')].map(e => e.innerText)")


def db_rows(path: Path) -> list:
    """The scoreboard read back with sqlite3 itself, not through demo.records.scoreboard."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.row_factory = sqlite3.Row
        return [dict(r) for r in db.execute("SELECT * FROM races ORDER BY id")]


def engine_text(run) -> str:
    return "".join(c.text for c in run.result.chunks)


def engine_tokens(run) -> list:
    return [t for c in run.result.chunks for t in c.token_ids]


def tok_s(result) -> float:
    """tok/s from a RunResult's own fields: generated tokens over its wall-clock time."""
    return sum(len(c.token_ids) for c in result.chunks) / (result.end - result.start)
