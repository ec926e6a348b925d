"""The step view in a real browser (Debian's headless Chromium, Playwright), on a pair whose
draft is often wrong: SmolLM2 in int4 drafting for its own gguf weights. The thrown-away
guesses must be struck through, and the model's tags must show as text."""

import re
from pathlib import Path

import pytest
import yaml

from .conftest import SMOLLM2, _free_port, has_module, require
from .test_browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, HTML_PROMPT

pytestmark = pytest.mark.browser
require(Path(CHROMIUM).exists(), f"Debian's chromium at {CHROMIUM} (sudo apt-get install chromium chromium-driver)")
require(has_module("playwright"), "the playwright Python package (pip install -r requirements-test.txt)")
from playwright import sync_api  # noqa: E402

PRESET = "smollm2-int4-draft"


@pytest.fixture(scope="module")
def app_with_a_wrong_draft(session_store, smollm2_ir, presets, tmp_path_factory):
    import app

    data = yaml.safe_load((Path(__file__).resolve().parents[1] / "models.yaml").read_text())
    preset = data["presets"][SMOLLM2]
    preset["draft"] = {**preset["draft"], "format": "int4_sym"}
    models = tmp_path_factory.mktemp("models") / "models.yaml"
    models.write_text(yaml.safe_dump({"default": PRESET, "presets": {PRESET: preset}}))
    session_store.prepare(presets.get(SMOLLM2).draft, "draft model", weight_format="int4_sym")
    demo = app.make_demo(preset=PRESET, models=models, cache_dir=session_store.cache_dir)
    app.launch(demo, port=_free_port(), prevent_thread_lock=True, quiet=True)
    try:
        yield demo
    finally:
        demo.close()


def test_the_step_view_strikes_through_thrown_away_guesses_as_text(app_with_a_wrong_draft, engine_runs):
    dialogs = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_context(viewport={"width": 1400, "height": 1600}).new_page()
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(app_with_a_wrong_draft.local_url)
        page.wait_for_function("() => document.querySelector('#startup')?.innerText.includes('Ready')",
                               timeout=240_000)
        page.locator(".label-wrap", has_text="Step by step").first.click()  # open the section
        page.fill("#prompt textarea", HTML_PROMPT)
        page.click("#run")
        page.wait_for_selector("#step-view .steps li", timeout=240_000)
        view = page.locator("#step-view .steps")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "step-view.png"), full_page=True)
        run = [r for r in engine_runs if r.side == "speculative" and r.prompt == HTML_PROMPT][-1]
        sizes = [len(c.token_ids) for _, c in run.chunks]
        kept = [int(k) for k in page.evaluate(
            "() => [...document.querySelectorAll('#step-view li')].map(li => li.dataset.kept)")]
        assert kept == [n - 1 for n in sizes[1:]]
        k = run.settings.assistant_tokens
        # Every step that kept fewer than K guesses shows the rest struck through.
        assert page.locator("#step-view li del").count() == sum(n - 1 < k for n in sizes[1:]) > 0
        assert page.locator("#acceptance-curve rect.curve-bar").count() == k
        tags = set(page.evaluate("() => [...document.querySelectorAll('#step-view .steps *')]"
                                 ".map(e => e.tagName.toLowerCase())"))
        assert tags <= {"p", "span", "del", "ol", "li"}, tags
        written = "".join(c.text for _, c in run.chunks)
        assert "<" in written, f"the model wrote no tag this time: {written!r}"
        shown = view.inner_text()
        assert re.search(r"<\w", shown), "the model's tags are not shown as text in the step view"
        differ = int(view.get_attribute("data-differ"))
        print(f"step view: {len(kept)} steps, {differ} differ from the run")  # the note's number (pytest -s)
        browser.close()
    assert dialogs == []
