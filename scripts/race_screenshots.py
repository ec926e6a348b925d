"""Take the race screenshots (README, docs/page.md) with Playwright and Debian's Chromium: a race on
the default preset with this machine's calibrated defaults, mid-race and finished.

    python scripts/race_screenshots.py [--preset NAME] [--cache-dir DIR] [--out docs]

Writes docs/screenshot.png (mid-race) and docs/screenshot-finished.png (after the race,
"Why this speedup?" open), the race's own recording beside them (docs/screenshot-race.json,
downloaded from the page as a visitor would), and the two images' captions in README.md and
docs/page.md, generated from that recording (tests/test_screenshot_captions.py fails when a
caption and the recording disagree). The browser renders on the same machine, so on a 2-core
box both sides run a little slower than in `python -m demo.bench`.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

PROMPT = "Write a Python function that merges two sorted lists into one sorted list, with a docstring and a short example."


def main() -> int:
    import app
    from booth_screenshots import _port, open_page  # scripts/ is on sys.path when run as a script
    from playwright import sync_api

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default=None)
    ap.add_argument("--cache-dir", type=Path)
    ap.add_argument("--out", type=Path, default=ROOT / "docs")
    args = ap.parse_args()

    demo = app.make_demo(preset=args.preset, cache_dir=args.cache_dir, bench=False)
    app.launch(demo, port=_port(), prevent_thread_lock=True, quiet=True)
    while demo.arena.startup.get()[0] not in ("ready", "failed"):  # the default pair loads first
        time.sleep(0.5)
    with sync_api.sync_playwright() as p:
        browser, page = open_page(p, demo.local_url)
        page.fill("#prompt textarea", PROMPT)
        page.click("#run")
        page.wait_for_function("() => (document.querySelector('#speculative-output')?.innerText || '').length > 200",
                               timeout=180_000)
        time.sleep(0.5)
        page.screenshot(path=str(args.out / "screenshot.png"))
        page.wait_for_function("() => document.querySelector('#summary')?.innerText.includes('speedup')",
                               timeout=180_000)
        why = page.locator("#summary details.why")
        if why.get_attribute("open") is None:
            why.locator("summary").click()
        page.screenshot(path=str(args.out / "screenshot-finished.png"), full_page=True)
        print(page.locator("#summary").inner_text())
        page.wait_for_selector("#race-recording", state="visible", timeout=60_000)
        with page.expect_download() as download:
            page.click("#race-recording")
        download.value.save_as(str(args.out / RECORDING))
        browser.close()
    demo.close()
    from demo.records.recording import load

    for doc in DOCS:
        write_captions(ROOT / doc, load(args.out / RECORDING))
    return 0


RECORDING = "screenshot-race.json"
DOCS = ("README.md", "docs/page.md")  # where the two screenshots appear


def captions(rec) -> dict:
    """image file name -> its caption, from the race's recording (nothing typed by hand)."""
    from demo.core.metrics import compare
    from demo.records.playback import date_label, machine_label, to_results

    results = to_results(rec)
    c = compare(results["baseline"], results["speculative"])
    where = f"{rec.mode} mode, {machine_label(rec)}, {date_label(rec)[:10]}"
    pair = f"main {rec.main_format} + draft {rec.draft_format}, K={rec.settings.assistant_tokens}"
    verdict = c.verdict
    if rec.baseline_format:  # the page's own words for why the texts may differ
        pair += f"; the baseline's main {rec.baseline_format}, this machine's fastest alone"
        if verdict != "identical":
            verdict += f" (the two sides read different main weights, {rec.baseline_format} and {rec.main_format})"
    return {"screenshot.png": f"The arena mid-race on the embedded Qwen2.5-Coder pair ({pair}; {where})",
            "screenshot-finished.png": f"After the race: {c.speedup:.2f}× ({c.speculative.tokens_per_s:.1f} vs "
                                       f"{c.baseline.tokens_per_s:.1f} tok/s, {where}), outputs {verdict}"}


def caption_pattern(name: str) -> "re.Pattern":
    return re.compile(r"!\[[^\]]*\]\(((?:docs/)?" + re.escape(name) + r")\)")


def write_captions(doc: Path, rec) -> None:
    text = doc.read_text()
    for name, words in captions(rec).items():
        text = caption_pattern(name).sub(lambda m: f"![{words}]({m.group(1)})", text)
    doc.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
