"""Take the booth's screenshots (docs/booth.md) with Playwright and Debian's Chromium.

    python scripts/booth_screenshots.py [--preset smollm2-self-draft] [--races 3] [--out docs]

Real races, not mock-ups: a scratch cache folder shares the prepared models of the normal
cache (so the real scoreboard is left alone), a few races of each example and of visitor
prompts fill its scoreboard, then a three-way race runs in the browser. Writes
docs/screenshot-scoreboard.png, docs/screenshot-three-way.png and docs/screenshot-kiosk.png.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VISITOR_PROMPTS = ["Name three colours of the rainbow and say one thing about each.",
                   "Write a haiku about a lighthouse."]


def open_page(playwright, url: str, width: int = 1400):
    """Debian's Chromium, headless, on the page at `url` once its Run button is there."""
    browser = playwright.chromium.launch(executable_path=os.environ.get("CHROMIUM", "/usr/bin/chromium"),
                                         args=CHROMIUM_ARGS, headless=True)
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.goto(url)
    page.wait_for_selector("#run")
    return browser, page


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    import app
    from gradio_client import Client
    from playwright import sync_api

    from demo.engine import three_way
    from demo.models.sources import ModelStore

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="smollm2-self-draft")
    ap.add_argument("--cache-dir", help="the cache whose prepared models to use (default: the usual one)")
    ap.add_argument("--races", type=int, default=3, help="races per example prompt")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--out", type=Path, default=ROOT / "docs")
    args = ap.parse_args()

    shared = ModelStore(args.cache_dir).cache_dir
    scratch = Path(tempfile.mkdtemp(prefix="booth-shots-")) / "cache"
    scratch.mkdir(parents=True)
    for name in ("models", "calibration"):
        if (shared / name).exists():
            (scratch / name).symlink_to((shared / name).resolve(), target_is_directory=True)

    demo = app.make_demo(preset=args.preset, cache_dir=scratch, bench=False)
    app.launch(demo, port=_port(), prevent_thread_lock=True, quiet=True)
    examples = demo.arena.presets.get(args.preset).examples
    k = demo.arena.default_assistant_tokens(args.preset)
    try:
        client = Client(demo.local_url, verbose=False)
        for i in range(args.races):
            for prompt in examples + VISITOR_PROMPTS[: 1 + i % 2]:
                for method in ("draft model", "prompt lookup"):
                    print(f"race: {method}: {prompt[:40]}", file=sys.stderr)
                    client.predict(prompt, args.preset, "CPU", "CPU", method, k, False, 0.4, args.max_new_tokens,
                                   False, 0.7, 0.9, False, "race: both at once", 0, 0, api_name="/race")
        client.close()
        with sync_api.sync_playwright() as p:
            browser, page = open_page(p, demo.local_url)
            page.locator("button[role=tab]", has_text="Three-way race").click()
            page.locator("#three-way-examples button").first.click()
            page.wait_for_function("() => document.querySelector('#three-way-prompt textarea').value.length > 0")
            box = page.locator("#three-way-max-new-tokens input[type=number]")
            box.fill(str(args.max_new_tokens))
            box.press("Tab")
            page.click("#three-way-run")
            page.wait_for_function("() => document.querySelector('#three-way-summary .three-way')?.dataset.winner",
                                   timeout=600_000)
            args.out.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(args.out / "screenshot-three-way.png"), full_page=True)
            page.locator("button[role=tab]", has_text="Scoreboard").click()
            page.wait_for_selector("#scoreboard svg.scoreboard-plot", timeout=30_000)
            page.locator("#scoreboard").screenshot(path=str(args.out / "screenshot-scoreboard.png"))
            browser.close()
    finally:
        demo.close()

    kiosk = app.make_demo(preset=args.preset, cache_dir=scratch, kiosk=True, idle_seconds=2)
    app.launch(kiosk, port=_port(), prevent_thread_lock=True, quiet=True)
    try:
        with sync_api.sync_playwright() as p:
            browser, page = open_page(p, kiosk.local_url, width=1600)
            page.wait_for_function("() => window.__kiosk && window.__kiosk.runs >= 1"
                                   " && document.querySelector('#summary .summary')", timeout=600_000)
            page.screenshot(path=str(args.out / "screenshot-kiosk.png"))
            browser.close()
    finally:
        kiosk.close()
    print(f"wrote {args.out}/screenshot-scoreboard.png, screenshot-three-way.png, screenshot-kiosk.png "
          f"({three_way.TITLES['lookup']} example on {args.preset})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
