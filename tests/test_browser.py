"""The page in a real browser: Debian's headless Chromium driven by Playwright.

gradio_client alone would not catch the trap of two panels that stream one after the other
in the browser, so this test watches the DOM while a race runs.
"""

import os
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

from .conftest import STOP_REACHES_ENGINE_S, has_module, require, steps_after_stop

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"
PROMPT = "Write a Python function that reverses a string, then explain it."
STORY = "Write a long story about a lighthouse keeper and a storm."
HTML_PROMPT = "Write a minimal HTML page with a <script> tag that shows an alert and an <img> tag."

pytestmark = pytest.mark.browser

# A skip on a developer's machine (saying what to install), a failure in CI.
require(Path(CHROMIUM).exists(), f"Debian's chromium at {CHROMIUM} (sudo apt-get install chromium chromium-driver)")
require(has_module("playwright"), "the playwright Python package (pip install -r requirements-test.txt)")
from playwright import sync_api  # noqa: E402

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
def page(running_app, engine_runs, tmp_path_factory):
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
        pg.wait_for_function("() => document.querySelector('#startup')?.innerText.includes('Ready')",
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
    if not box.is_visible():
        page.locator(".label-wrap", has_text="Settings").first.click()  # open the accordion
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
    set_max_new_tokens(page, 160)
    page.fill("#prompt textarea", PROMPT)
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


STEPS = """() => [...document.querySelectorAll('#speculative-output .step')].map(step => {
  const acc = step.querySelector('.tok-accepted'), own = step.querySelector('.tok-main');
  return {accepted: acc ? acc.textContent : null, n: acc ? +acc.dataset.n : 0,
          main: own ? own.textContent : null};
})"""


def last_run(engine_runs, side, prompt):
    runs = [r for r in engine_runs if r.side == side and r.prompt == prompt]
    assert runs, f"the engine made no {side} run for {prompt!r}"
    return runs[-1]


def test_speculation_is_visible_after_the_race(page, engine_runs):
    # Runs on the finished race of the test above. The page's marks are compared with what
    # the engine really did: OpenVINO's own accepted count, and the accepted tokens' text
    # decoded here, step by step, from the token ids the pipeline streamed.
    run = last_run(engine_runs, "speculative", PROMPT)
    assert run.result is not None and run.result.ov_accepted_tokens is not None
    chunks = [c for _, c in run.chunks]
    steps = page.evaluate(STEPS)
    assert len(steps) == len(chunks), "one marked step per main-model step"
    # OpenVINO's count of accepted draft tokens leaves out the final step (tests/test_engine.py).
    assert sum(s["n"] for s in steps[:-1]) == run.result.ov_accepted_tokens > 0
    decode = run.runner.tokenizer.decode
    compared = 0
    for i, (step, chunk) in enumerate(zip(steps, chunks)):
        guessed, own = decode(list(chunk.token_ids[:-1])), decode(list(chunk.token_ids[-1:]))
        if chunk.text != decode(list(chunk.token_ids)) or chunk.text != guessed + own:
            continue  # a character split across tokens: its bytes are shown where it completes
        if len(chunk.token_ids) > 1:
            assert step["accepted"] == guessed and step["n"] == len(chunk.token_ids) - 1, (i, step, chunk)
        else:
            assert step["accepted"] is None, (i, step, chunk)
        assert step["main"] == own, (i, step, chunk)
        compared += 1
    assert compared >= len(chunks) - 2
    assert page.locator("#chart polyline.line-baseline").count() == 1
    assert page.locator("#chart polyline.line-speculative").count() == 1
    assert page.locator("#chart svg.accept-hist rect").count() >= 1
    # Step boundaries can be shown on demand.
    page.locator("#show-steps input").check()
    assert "show-steps" in page.locator("#speculative-output").get_attribute("class")


def test_why_this_speedup_appears_after_the_race_with_the_engines_numbers(page, engine_runs):
    # Runs on the finished race above: the section's figures must be OpenVINO's timers of
    # the very runs the engine made, not numbers the page computed on its own.
    why = page.locator("#summary details.why")
    assert why.count() == 1 and "Why this speedup?" in why.inner_text()
    spec = last_run(engine_runs, "speculative", PROMPT).result
    base = last_run(engine_runs, "baseline", PROMPT).result
    parts = {p["part"]: float(p["seconds"]) for p in page.evaluate(
        "() => [...document.querySelectorAll('#summary .why-part')].map(e => e.dataset)")}
    assert parts["drafting"] == pytest.approx(spec.ov_draft_infer_ms / 1000, abs=1e-3)
    assert parts["verifying"] == pytest.approx(spec.ov_main_infer_ms / 1000, abs=1e-3)
    # OpenVINO's per-step timers of the main model, the prompt's step (prefill) left out.
    per_step = lambda ms: sum(ms[1:]) / len(ms[1:])  # noqa: E731
    ratio = per_step(spec.ov_main_step_ms) / per_step(base.ov_main_step_ms)
    assert float(why.get_attribute("data-cost-ratio")) == pytest.approx(ratio, rel=1e-3)
    text = why.inner_text()
    assert f"Checking {spec_k(page)} tokens cost {ratio:.1f}× one token here" in text
    assert "Measured speedup" in text


def spec_k(page) -> int:
    """K + 1: the tokens one verify step checks, from the page's own slider."""
    return int(page.locator("#assistant-tokens input[type=number]").input_value()) + 1


def test_stop_freezes_both_panels_and_stops_the_engine_within_two_steps(page, engine_runs):
    set_max_new_tokens(page, 1024)
    page.fill("#prompt textarea", STORY)
    page.evaluate(SAMPLER)
    page.click("#run")
    # Both sides streaming, judged by the engine (the panels may still hold the last race's text).
    for _ in range(600):  # hang guard: 120 s
        if all(any(r.prompt == STORY and len(r.chunks) >= 5 for r in engine_runs if r.side == side)
               for side in ("baseline", "speculative")):
            break
        page.wait_for_timeout(200)
    else:
        pytest.fail("the story race never streamed on both sides")
    page.wait_for_function(
        "() => window.__samples.some(x => x.b > 20 && x.s > 20 && x.bTok > 0 && x.sTok > 0)", timeout=120_000)
    # The Stop button asks the server to cancel; when the server answers, it has closed the
    # race handler, so from then on each side may finish at most two steps.
    # The click is dispatched on the button, not aimed with the pointer: once, under two pytest
    # workers, Playwright's pointer click (which first waits for the button to be stable and hit
    # by the pointer) outlasted its 30 s while both panels streamed. What is tested is what Stop
    # does, not the pointer's path to it.
    with page.expect_response(lambda r: r.url.endswith("/cancel"), timeout=30_000):
        page.dispatch_event("#stop", "click")
    stopped_at = time.perf_counter()

    def shown():
        last = samples(page)[-1]
        return last["b"], last["s"], last["bTok"], last["sTok"]

    # The panels freeze: once the last update after Stop has arrived (when, depends on how
    # busy the machine is), nothing changes any more. A page that kept streaming would keep
    # changing until the hang guard.
    frozen = shown()
    for _ in range(20):  # hang guard: 30 s
        page.wait_for_timeout(1500)
        if shown() == frozen:
            break
        frozen = shown()
    else:
        pytest.fail("the panels still changed 30 s after Stop")
    page.evaluate("() => clearInterval(window.__sampler)")
    # Taken after Stop, not before, so nothing slow sits between the race streaming and Stop:
    # under two pytest workers the 1,024-token race once ended before Stop was pressed.
    page.screenshot(path=str(ARTIFACTS / "race-stopped.png"), full_page=True)
    for side in ("baseline", "speculative"):
        run = last_run(engine_runs, side, STORY)
        assert run.done.wait(60), f"the {side} run did not end after Stop"  # hang guard
        late = steps_after_stop(run)
        assert run.result.cancelled and len(late) <= 2, f"{side}: {len(late)} steps after its engine saw Stop"
        assert run.stop_set_at - stopped_at < STOP_REACHES_ENGINE_S, f"{side}: Stop raised no flag in time"


def test_model_output_is_shown_as_text_not_html(page, engine_runs):
    # SmolLM2 answers this prompt with <script>, <html> and <body> tags (checked below, so
    # the test cannot pass vacuously). The page must show them as text, exactly as the
    # model wrote them, and never create an element from them or run their script.
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    set_max_new_tokens(page, 64)
    page.fill("#prompt textarea", HTML_PROMPT)
    page.click("#run")
    page.wait_for_function("""() => {
        const done = (id) => document.querySelector(`#${id}-stats .stats[data-state=done][data-tokens="64"]`);
        return done('baseline') && done('speculative')
            && document.querySelector('#summary')?.innerText.includes('speedup');
    }""", timeout=180_000)
    page.screenshot(path=str(ARTIFACTS / "race-html-answer.png"), full_page=True)
    for side in ("baseline", "speculative"):
        written = "".join(c.text for _, c in last_run(engine_runs, side, HTML_PROMPT).chunks)
        assert "<script>" in written, f"the model did not write a tag this time: {written!r}"
        shown = page.evaluate(f"() => document.querySelector('#{side}-output .panel-text').textContent")
        assert shown == written
        tags = page.evaluate(f"""() => [...document.querySelectorAll('#{side}-output .panel-text *')]
                                        .map(e => e.tagName.toLowerCase())""")
        assert set(tags) <= {"span"}, f"{side}: elements made from the model's text: {set(tags)}"
    assert dialogs == [], f"the model's script ran: {dialogs}"


def test_page_makes_no_request_outside_localhost(page):
    hosts = {urlparse(u).hostname for u in page.requests if urlparse(u).scheme in ("http", "https", "ws", "wss")}
    assert hosts <= {"127.0.0.1", "localhost"}, hosts
