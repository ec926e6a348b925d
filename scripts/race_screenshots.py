"""Take the race screenshots (README, docs/page.md) with Playwright and Debian's Chromium: a race on
the default preset with this machine's calibrated defaults, mid-race and finished.

    python scripts/race_screenshots.py [--preset NAME] [--cache-dir DIR] [--out docs]

Writes docs/screenshot.png (mid-race) and docs/screenshot-finished.png (after the race,
"Why this speedup?" open). The browser renders on the same machine, so on a 2-core box
both sides run a little slower than in `python -m demo.bench`.
"""

from __future__ import annotations

import argparse
import os
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
        browser.close()
    demo.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
