"""Does the web page slow generation down? Measure the same race through the page and
through the engine directly, interleaved, on the same loaded pipelines.

    python -m lab.app_overhead --preset smollm2-self-draft --repeat 5 --json overhead.json

Both paths run in one process and share one Arena (so the very same compiled pipelines);
runs alternate page / engine so a slow phase of the machine hits both. Prints and writes
the tok/s of each side on each path and the ratio page ÷ engine.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Optional

from demo.core.errors import DemoError

PROMPT = "Write a Python function that checks whether a string is a palindrome, with a docstring."


def _engine_once(arena, request) -> dict:
    from demo.core.streaming import DoneEvent

    results = {e.side: e.result for e in arena.run(request) if isinstance(e, DoneEvent)}
    s = arena.summarize(results, request)
    return {"baseline": s.baseline.tokens_per_s, "speculative": s.speculative.tokens_per_s}


def _page_once(client, preset: str, k: int, max_new_tokens: int) -> dict:
    out = client.predict(PROMPT, preset, "CPU", "CPU", "draft model", k, False, 0.4, max_new_tokens,
                         False, 0.7, 0.9, False, "race: both at once", 0, 0, api_name="/race")
    tps = [float(re.search(r'data-tokens-per-s="([\d.]+)"', html).group(1)) for html in (out[1], out[3])]
    return {"baseline": tps[0], "speculative": tps[1]}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lab.app_overhead", description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="smollm2-self-draft")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--cache-dir", type=Path)
    args = ap.parse_args(argv)

    import app as app_module
    from gradio_client import Client

    from demo.core.settings import GenerationSettings
    from demo.engine.arena import RaceRequest

    try:
        demo = app_module.make_demo(args.preset, cache_dir=args.cache_dir)
    except DemoError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    arena = demo.arena
    k = arena.presets.get(args.preset).assistant_tokens
    request = RaceRequest(prompt=PROMPT, preset=args.preset,
                          settings=GenerationSettings(max_new_tokens=args.max_new_tokens, assistant_tokens=k))
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    app_module.launch(demo, port=port, prevent_thread_lock=True, quiet=True)
    try:
        client = Client(demo.local_url, verbose=False)
        _engine_once(arena, request)  # loads and warms up the pipelines both paths share
        samples = []
        for i in range(args.repeat):
            samples.append({"repeat": i, "page": _page_once(client, args.preset, k, args.max_new_tokens),
                            "engine": _engine_once(arena, request)})
            print(f"#{i + 1}: page {samples[-1]['page']}  engine {samples[-1]['engine']}", flush=True)
    finally:
        demo.close()
    summary = {}
    for side in ("baseline", "speculative"):
        page = statistics.median(s["page"][side] for s in samples)
        engine = statistics.median(s["engine"][side] for s in samples)
        summary[side] = {"page_median_tok_s": page, "engine_median_tok_s": engine, "page_over_engine": page / engine}
        print(f"{side:12s} page {page:6.2f} tok/s  engine {engine:6.2f} tok/s  ratio {page / engine:.3f}")
    if args.json:
        args.json.write_text(json.dumps({"preset": args.preset, "max_new_tokens": args.max_new_tokens,
                                         "assistant_tokens": k, "samples": samples, "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
