"""The page in a real browser: Debian's headless Chromium driven by Playwright.

gradio_client alone would not catch the trap of two panels that stream one after the other
in the browser, so this test watches the DOM while a race runs.
"""

import os
from pathlib import Path
from urllib.parse import urlparse

import pytest

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"

pytestmark = pytest.mark.browser

if not Path(CHROMIUM).exists():
    pytest.skip(f"needs Debian's chromium at {CHROMIUM} (apt-get install chromium chromium-driver)",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright Python package")

# Offline-safe flags: no background requests to Google's hosts, no sandbox as root.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

SAMPLER = """() => {
  window.__samples = [];
  const q = (sel) => document.querySelector(sel);
  window.__sampler = setInterval(() => {
    const b = q('#baseline-output .panel-text'), s = q('#speculative-output .panel-text');
    const bs = q('#baseline-stats .stats'), ss = q('#speculative-stats .stats');
    window.__samples.push({
      t: performance.now(),
      b: b && !b.querySelector('.placeholder') ? b.innerText.length : 0,
      s: s && !s.querySelector('.placeholder') ? s.innerText.length : 0,
      bState: bs ? bs.dataset.state : null, sState: ss ? ss.dataset.state : null,
      bTok: bs && bs.dataset.tokens ? +bs.dataset.tokens : 0, sTok: ss && ss.dataset.tokens ? +ss.dataset.tokens : 0,
    });
  }, 25);
}"""


@pytest.fixture(scope="module")
def page(running_app, tmp_path_factory):
    requests = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS,
                                    headless=True)
        context = browser.new_context(viewport={"width": 1400, "height": 1300})
        pg = context.new_page()
        pg.on("request", lambda r: requests.append(r.url))
        pg.goto(running_app.local_url)
        pg.wait_for_selector("#run", timeout=30_000)
        # The page prepares and warms up the preset on load, and says so.
        pg.wait_for_function("() => document.querySelector('#status')?.innerText.includes('Ready')",
                             timeout=180_000)
        pg.requests = requests
        yield pg
        context.close()
        browser.close()


def samples(page):
    return page.evaluate("() => window.__samples")


def set_max_new_tokens(page, value):
    """Type into the slider's number box; retry, since a re-render can swallow the first try."""
    box = page.locator("#max-new-tokens input[type=number]")
    check = f"() => document.querySelector('#max-new-tokens input[type=range]').value == '{value}'"
    for _ in range(3):
        box.fill(str(value))
        box.press("Tab")  # the slider takes the typed value on blur
        try:
            page.wait_for_function(check, timeout=3_000)
            return
        except sync_api.TimeoutError:
            continue
    raise AssertionError(f"could not set max new tokens to {value}")


def test_both_panels_stream_at_the_same_time_and_counters_move(page):
    page.locator(".label-wrap", has_text="Settings").first.click()
    set_max_new_tokens(page, 160)
    page.fill("#prompt textarea", "Write a Python function that reverses a string, then explain it.")
    page.evaluate(SAMPLER)
    page.click("#run")
    page.wait_for_function(
        "() => document.querySelector('#summary')?.innerText.includes('speedup')", timeout=180_000)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "race-finished.png"), full_page=True)
    got = samples(page)
    page.evaluate("() => clearInterval(window.__sampler)")
    # Both panels show text while NEITHER side has finished: the streams overlap in time.
    overlap = [x for x in got if x["b"] > 0 and x["s"] > 0
               and x["bState"] == "running" and x["sState"] == "running"]
    assert overlap, "the two panels did not stream at the same time"
    # The counters move: each side's token count takes several increasing values live.
    for key in ("bTok", "sTok"):
        live = sorted({x[key] for x in got if x[key] > 0})
        assert len(live) >= 3, f"{key} counter did not move: {live}"
    assert got[-1]["bTok"] == 160 and got[-1]["sTok"] == 160


def test_speculation_is_visible_after_the_race(page):
    # Runs on the finished race of the test above.
    marks = page.evaluate("""() => [...document.querySelectorAll('#speculative-output .tok-accepted')]
                                       .map(e => +e.dataset.n)""")
    own = page.locator("#speculative-output .tok-main").count()
    accepted = int(page.locator("#summary .summary").get_attribute("data-accepted"))
    assert marks and own > 0
    assert sum(marks) == accepted  # every accepted draft token is marked, and nothing else
    assert page.locator("#chart polyline.line-baseline").count() == 1
    assert page.locator("#chart polyline.line-speculative").count() == 1
    assert page.locator("#chart svg.accept-hist rect").count() >= 1
    # Step boundaries can be shown on demand.
    page.locator("#show-steps input").check()
    assert "show-steps" in page.locator("#speculative-output").get_attribute("class")


def test_stop_freezes_both_panels(page):
    set_max_new_tokens(page, 1024)
    page.fill("#prompt textarea", "Write a long story about a lighthouse keeper and a storm.")
    page.evaluate(SAMPLER)
    page.click("#run")
    page.wait_for_function(
        "() => window.__samples.some(x => x.b > 20 && x.s > 20)", timeout=120_000)
    page.screenshot(path=str(ARTIFACTS / "race-running.png"), full_page=True)
    page.click("#stop")
    page.wait_for_timeout(700)
    frozen = samples(page)[-1]
    page.wait_for_timeout(1500)
    later = samples(page)[-1]
    page.evaluate("() => clearInterval(window.__sampler)")
    assert (later["b"], later["s"], later["bTok"], later["sTok"]) == (frozen["b"], frozen["s"], frozen["bTok"], frozen["sTok"])
    assert later["bTok"] < 1024 and later["sTok"] < 1024


def test_model_output_is_shown_as_text_not_html(page):
    # Whatever the model writes goes through html.escape: no element is ever created from it.
    assert page.evaluate("() => document.querySelectorAll('#baseline-output script, #speculative-output script, "
                         "#baseline-output img, #speculative-output img').length") == 0


def test_page_makes_no_request_outside_localhost(page):
    hosts = {urlparse(u).hostname for u in page.requests if urlparse(u).scheme in ("http", "https", "ws", "wss")}
    assert hosts <= {"127.0.0.1", "localhost"}, hosts
