"""Speculative decoding arena: run with `python app.py`, open http://127.0.0.1:7860.

Hugging Face Spaces imports this file and finds the module-level `demo`.
"""

import os

# Nothing on the page needs the outside world; keep Gradio and huggingface_hub from trying.
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import argparse
import sys

from demo.calibrate.launch import LaunchCalibrator
from demo.core.errors import run_command
from demo.core.quiet_log import QuietLog
from demo.engine.arena import Arena
from demo.web import site
from demo.web.booth import Booth
from demo.web.visitors import VisitorIds


def make_demo(preset=None, models=None, cache_dir=None, allow_downloads=False, bench=True, warm=True,
              calibrate=False, report=lambda message: None, kiosk=False, idle_seconds=45.0, keep_prompts=False,
              trust_forwarded_for=False, visitors_per_address=1, profiles=True, arena=None):
    """Build the page; with `warm`, start preparing and loading the default pair right away.

    `kiosk`: large type, settings hidden, and an attract loop that races the preset's next
    example after `idle_seconds` without input (demo.web.kiosk); `keep_prompts`: store
    visitors' prompt text on the scoreboard (otherwise only "visitor"); `trust_forwarded_for`:
    a reverse proxy of the operator's sets X-Forwarded-For, so it names each visitor's address;
    `visitors_per_address`: how many visitors one address stands for (a venue behind one NAT);
    `profiles`: a launch on a CPU class with a profile confirms it instead of measuring whole;
    `arena`: the engine to serve instead of one made from `models` and `cache_dir` (the page's
    tests hand in one whose pipelines are scripted: tests/scripted_pipelines.py).
    """
    arena = arena if arena is not None else Arena.create(models, cache_dir, allow_downloads=allow_downloads)
    if preset is not None:
        arena.presets.get(preset)  # an unknown name fails here, with the list of choices
        arena.presets = arena.presets.model_copy(update={"default": preset})
    booth = Booth(kiosk=kiosk, idle_seconds=idle_seconds, keep_prompts=keep_prompts)
    demo = site.assemble(arena, booth, VisitorIds.from_environment(trust_forwarded_for, visitors_per_address),
                         bench_enabled=bench and not kiosk)
    if warm:
        arena.start_background_warmup(report, calibrator=LaunchCalibrator(profiles) if calibrate else None)
    return demo


def _print(message: str) -> None:
    print(f"[arena] {message}", file=sys.stderr, flush=True)


_terminal_progress = QuietLog(_print)


def launch(demo, host="127.0.0.1", port=7860, share=False, **kwargs):
    """Serve the page with the guards demo.web.site puts in front of every server of it."""
    site.distrust_forwarded_headers()
    site.raise_open_files_limit()
    return demo.launch(server_name=host, server_port=port, share=share, app_kwargs={"middleware": site.guards(demo)},
                       state_session_capacity=demo.state_session_capacity, **site.serving_options(demo), **kwargs)


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
    ap.add_argument("--bench", action="store_true",
                    help="offer the Benchmark tab (about 40 minutes of the whole machine per run; off by default, "
                         "since anyone who reaches the page could start it)")
    ap.add_argument("--kiosk", action="store_true",
                    help="booth screen: large type, settings hidden, races the next example after --idle-seconds")
    ap.add_argument("--idle-seconds", type=float, default=45.0,
                    help="kiosk: seconds without input before the next example races (default 45)")
    ap.add_argument("--keep-prompts", action="store_true",
                    help="store visitors' prompt text on the scoreboard (default: only that it was a visitor's)")
    ap.add_argument("--trust-forwarded-for", action="store_true",
                    help="behind your own reverse proxy: limit each visitor by the address it appends to "
                         "X-Forwarded-For (default: by the connecting address, and on a Space by the platform's "
                         "entry; a loopback peer names nobody, so its visitors share one allowance)")
    ap.add_argument("--visitors-per-address", type=int, default=1, metavar="N",
                    help="a venue whose visitors share one public address (a conference NAT in front of a "
                         "Space): let each address hold N jobs at once and N times each per-visitor allowance "
                         "(default 1, at most 64)")
    ap.add_argument("--no-calibrate", dest="calibrate", action="store_false",
                    help="skip measuring this machine once after the first prepare (demo.calibrate)")
    ap.add_argument("--no-profiles", dest="profiles", action="store_false",
                    help="measure this machine whole even where its CPU class has a profile (demo/calibrate/profiles)")
    args = ap.parse_args(argv)

    def serve() -> int:
        demo = make_demo(args.preset, args.models, args.cache_dir, allow_downloads=args.allow_downloads,
                         bench=args.bench, calibrate=args.calibrate, report=_terminal_progress,
                         kiosk=args.kiosk, idle_seconds=args.idle_seconds, keep_prompts=args.keep_prompts,
                         trust_forwarded_for=args.trust_forwarded_for,
                         visitors_per_address=args.visitors_per_address, profiles=args.profiles)
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
