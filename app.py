"""Speculative decoding arena: run with `python app.py`, open http://127.0.0.1:7860.

Hugging Face Spaces imports this file and finds the module-level `demo`.
"""

import os

# Nothing on the page needs the outside world; keep Gradio and huggingface_hub from trying.
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import argparse
import sys

from starlette.middleware import Middleware

from demo.calibrate.launch import LaunchCalibrator
from demo.core.errors import run_command
from demo.core.quiet_log import QuietLog
from demo.engine.arena import Arena
from demo.web.booth import Booth
from demo.web.files import MAX_UPLOAD_BYTES
from demo.web.render import CSS
from demo.web.style import CSS as BOOTH_CSS
from demo.web.ui import THEME, build_demo
from demo.web.limits import BodyLimit
from demo.web.visitors import QueueDoor, VisitorIds

# Gradio's one line for every queued event: races, chat turns, three-way races, replays, benchmarks
# and CSV exports (light events skip it). Each lane may fill only its share of it
# (demo.web.visitors.LANE_WAITING, whose sum stays below this). The engine runs one job at a time.
MAX_QUEUE = 16


def _is_loopback(host: str) -> bool:
    return host in ("127.0.0.1", "localhost", "::1")


def make_demo(preset=None, models=None, cache_dir=None, allow_downloads=False, bench=True, warm=True,
              calibrate=False, report=lambda message: None, kiosk=False, idle_seconds=45.0, keep_prompts=False,
              trust_forwarded_for=False):
    """Build the page; with `warm`, start preparing and loading the default pair right away.

    `kiosk`: large type, settings hidden, and an attract loop that races the preset's next
    example after `idle_seconds` without input (demo.web.kiosk); `keep_prompts`: store
    visitors' prompt text on the scoreboard (otherwise only "visitor"); `trust_forwarded_for`:
    a reverse proxy of the operator's sets X-Forwarded-For, so it names each visitor's address.
    """
    arena = Arena.create(models, cache_dir, allow_downloads=allow_downloads)
    if preset is not None:
        arena.presets.get(preset)  # an unknown name fails here, with the list of choices
        arena.presets = arena.presets.model_copy(update={"default": preset})
    booth = Booth(kiosk=kiosk, idle_seconds=idle_seconds, keep_prompts=keep_prompts)
    door = QueueDoor(VisitorIds.from_environment(trust_forwarded_for), arena.admission)
    demo = build_demo(arena, bench_enabled=bench and not kiosk, booth=booth, door=door).queue(
        default_concurrency_limit=1, max_size=MAX_QUEUE)
    door.install(demo)
    demo.arena = arena  # for tools that drive the engine next to the page (demo.app_overhead)
    demo.visitor_ids = door.ids  # for launch(): the body limit and upload quotas key visitors the same way
    if warm:
        arena.start_background_warmup(report, calibrator=LaunchCalibrator() if calibrate else None)
    return demo


def _print(message: str) -> None:
    print(f"[arena] {message}", file=sys.stderr, flush=True)


_terminal_progress = QuietLog(_print)


def launch(demo, host="127.0.0.1", port=7860, share=False, **kwargs):
    # max_file_size: Gradio keeps every upload on disk for an hour; the page only takes recordings.
    # BodyLimit: every request body bounded (413) before Gradio reads it, uploads counted per visitor.
    # ssr_mode=False: Gradio's Node front proxy would hide the peer's address and bypass BodyLimit.
    ids = getattr(demo, "visitor_ids", None) or VisitorIds.from_environment()
    app_kwargs = {"middleware": [Middleware(BodyLimit, visitor_ids=ids)]}
    return demo.launch(server_name=host, server_port=port, share=share, theme=THEME, css=CSS + BOOTH_CSS,
                       show_error=False, max_file_size=MAX_UPLOAD_BYTES, app_kwargs=app_kwargs, ssr_mode=False,
                       **kwargs)


def bench_by_default(host: str, share: bool, trust_forwarded_for: bool) -> bool:
    """The Benchmark tab (about 40 minutes of the whole machine) is on by default only for a page that
    nobody outside can reach: bound to loopback, no public link, no proxy in front, not a Space."""
    return _is_loopback(host) and not share and not trust_forwarded_for and not VisitorIds.from_environment().on_space


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Speculative decoding arena (OpenVINO GenAI + Gradio)")
    ap.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                    help="address to bind (default 127.0.0.1; use 0.0.0.0 to serve your network)")
    ap.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", 7860)))
    ap.add_argument("--preset", help="preset to show first (default: models.yaml's default)")
    ap.add_argument("--models", help="path to models.yaml")
    ap.add_argument("--cache-dir", help="prepared-model cache (default $SPECDEC_CACHE_DIR or ~/.cache/speculative-arena)")
    ap.add_argument("--share", action="store_true", help="also create a public gradio.live link (off by default)")
    ap.add_argument("--allow-downloads", action="store_true",
                    help="let visitors pick presets that are not prepared yet (hub downloads, optimum exports)")
    bench = ap.add_mutually_exclusive_group()
    bench.add_argument("--bench", dest="bench", action="store_true", default=None,
                       help="offer the Benchmark tab even where strangers can reach the page (default: only when "
                            "bound to 127.0.0.1, without --share or --trust-forwarded-for, and not on a Space)")
    bench.add_argument("--no-bench", dest="bench", action="store_false", help="hide the Benchmark tab")
    ap.add_argument("--kiosk", action="store_true",
                    help="booth screen: large type, settings hidden, races the next example after --idle-seconds")
    ap.add_argument("--idle-seconds", type=float, default=45.0,
                    help="kiosk: seconds without input before the next example races (default 45)")
    ap.add_argument("--keep-prompts", action="store_true",
                    help="store visitors' prompt text on the scoreboard (default: only that it was a visitor's)")
    ap.add_argument("--trust-forwarded-for", action="store_true",
                    help="behind your own reverse proxy: limit each visitor by the address it appends to "
                         "X-Forwarded-For (default: by Gradio session, and by the peer's address when public)")
    ap.add_argument("--no-calibrate", dest="calibrate", action="store_false",
                    help="skip measuring this machine once after the first prepare (demo.calibrate)")
    args = ap.parse_args(argv)
    bench_enabled = args.bench if args.bench is not None else \
        bench_by_default(args.host, args.share, args.trust_forwarded_for)

    def serve() -> int:
        demo = make_demo(args.preset, args.models, args.cache_dir, allow_downloads=args.allow_downloads,
                         bench=bench_enabled, calibrate=args.calibrate, report=_terminal_progress,
                         kiosk=args.kiosk, idle_seconds=args.idle_seconds, keep_prompts=args.keep_prompts,
                         trust_forwarded_for=args.trust_forwarded_for)
        launch(demo, args.host, args.port, args.share)
        return 0

    return run_command(serve)


if __name__ == "__main__":
    # Hugging Face Spaces runs this too; it sets GRADIO_SERVER_NAME=0.0.0.0 for us.
    sys.exit(main())
else:
    # For importers (reload mode, embedding, tests): no Benchmark tab, and nothing heavy
    # at import time; `python app.py` (what Spaces runs) prepares the default pair at once.
    demo = make_demo(bench=False, warm=False)
