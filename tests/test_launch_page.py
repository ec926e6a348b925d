"""A newcomer's first minutes, in Debian's Chromium: the app launches on an empty cache and the
visitor presses Run at once, while the models are still being prepared.

The launch is held at its first step by the test itself (it holds the prepare lock of the
main model's folder, as a second process preparing it would), so the page is sampled while
it waits, by events and not by how long anything took; then the SmolLM2 fixture is linked
in and the lock let go, and the page is sampled through the race and until Ready.

Judged from the page alone: the visitor's status line never alternates between two
messages, never calls the visitor's own race another run ahead, the panels say what they
wait for, and nothing shown needs an emoji font (Debian has none: such glyphs are boxes).
"""

import fcntl
import os
import re
import shutil

import pytest

from .conftest import SMOLLM2, _free_port
from .test_browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, set_max_new_tokens

from playwright import sync_api  # noqa: E402  (test_browser skips the module without it)

pytestmark = pytest.mark.browser
HANG_GUARD_MS = 180_000  # only a hang reaches it
HELD_SAMPLES = 40        # samples (every 100 ms) taken while the launch is held at its first step

SAMPLER = """() => {
  window.__samples = [];
  const text = (sel) => { const e = document.querySelector(sel); return e ? e.innerText.trim() : ''; };
  window.__sampler = setInterval(() => {
    window.__samples.push({
      status: text('#status'), startup: text('#startup'),
      base: text('#baseline-output .placeholder'), spec: text('#speculative-output .placeholder'),
      bars: document.querySelectorAll('#startup .bar').length,
    });
  }, 100);
}"""
# Characters a page cannot show without an emoji or symbol font: miscellaneous technical
# (an hourglass, a stop square), miscellaneous symbols and dingbats, pictographs, and the
# selector that asks for emoji presentation.
NEEDS_A_FONT = re.compile("[\u2300-\u23ff\u2600-\u27bf\U0001F000-\U0001FFFF\ufe0f]")


@pytest.fixture
def held_launch(tmp_path, presets, session_store, smollm2_ir):
    """The app on an empty cache, its prepare of the main model held until `release()`."""
    import app
    from demo.models.sources import ModelStore

    store = ModelStore(tmp_path / "cache")
    final = store.folder_for(presets.get(SMOLLM2).main)
    lock = store.lock_path(final)
    lock.parent.mkdir(parents=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    held = [True]

    def release():
        shutil.copytree(smollm2_ir, final, copy_function=os.link)  # what the prepare we waited for made
        os.close(fd)
        held[0] = False

    demo = app.make_demo(preset=SMOLLM2, cache_dir=store.cache_dir)
    app.launch(demo, port=_free_port(), prevent_thread_lock=True, quiet=True)
    demo.release = release
    try:
        yield demo
    finally:
        if held[0]:
            os.close(fd)
        demo.close()


def runs_of(values):
    """Consecutive duplicates collapsed: what the line showed, in order."""
    out = []
    for v in values:
        if v and (not out or out[-1] != v):
            out.append(v)
    return out


def assert_one_status_at_a_time(got):
    shown = runs_of([s["status"] for s in got])
    returned = [m for i, m in enumerate(shown) if m in shown[:i]]
    assert not returned, f"the status line alternated between messages: {shown}"
    for s in got:
        for where in ("status", "startup"):
            assert "ahead of you" not in s[where], f"the visitor's own race read as a run ahead ({where}): {s[where]!r}"


def test_a_launch_and_a_race_each_say_one_thing_at_a_time(held_launch):
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_context(viewport={"width": 1400, "height": 1300}).new_page()
        try:
            page.goto(held_launch.local_url)
            page.wait_for_selector("#run", timeout=30_000)
            set_max_new_tokens(page, 16)
            page.fill("#prompt textarea", "Name three colours.")
            page.evaluate(SAMPLER)
            page.click("#run")  # at once: the launch is still preparing the models
            page.wait_for_function(f"() => window.__samples.filter(s => s.status).length >= {HELD_SAMPLES}",
                                   timeout=HANG_GUARD_MS)
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "launch-preparing.png"))  # to look at: no box for a missing glyph
            held_launch.release()
            page.wait_for_function("() => document.querySelector('#summary')?.innerText.includes('speedup')",
                                   timeout=HANG_GUARD_MS)
            assert_one_status_at_a_time(page.evaluate("() => window.__samples"))  # the race is over
            page.wait_for_function("() => document.querySelector('#startup')?.innerText.includes('Ready')",
                                   timeout=HANG_GUARD_MS)
            got = page.evaluate("() => { clearInterval(window.__sampler); return window.__samples; }")
            body = page.inner_text("body")
        finally:
            browser.close()

    assert_one_status_at_a_time(got)
    # While the launch was held, the visitor's line said what the race waits for, and so did the panels.
    waiting = [s for s in got[:HELD_SAMPLES] if s["status"]]
    assert waiting and all("waiting for the models" in s["status"] for s in waiting[-5:]), runs_of(
        [s["status"] for s in got])
    placeholders = runs_of([s["base"] for s in got] + [s["spec"] for s in got])
    assert "loading…" not in placeholders and any("waiting for the models" in t for t in placeholders), placeholders
    # The launch had its own line meanwhile, with a bar for the task it was on.
    assert any("Getting the models ready" in s["startup"] and s["bars"] for s in got[:HELD_SAMPLES])
    for text in [body] + [s[k] for s in got for k in ("status", "startup", "base", "spec")]:
        assert not NEEDS_A_FONT.search(text), f"a glyph that needs an emoji font: {NEEDS_A_FONT.findall(text)}"
