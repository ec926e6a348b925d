"""Record a race to a JSON file the page can replay (demo.records.recording).

    python -m demo.record --preset smollm2-self-draft --out recordings/smollm2-race.json "prompt"
    python -m demo.record --preset NAME --mode three-way --out recordings/NAME-three-way.json "prompt"

The recordings in recordings/ were made with this command; the page's Recorded races tab
offers them, so a booth can show a race before its models are prepared.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path
from typing import Optional

from .core.errors import DemoError, run_command


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m demo.record", description=__doc__.split("\n")[0])
    ap.add_argument("prompt")
    ap.add_argument("--out", type=Path, required=True, help="where to write the recording (.json)")
    ap.add_argument("--preset", help="a preset from models.yaml (default: its default)")
    ap.add_argument("--models", type=Path, help="path to models.yaml")
    ap.add_argument("--cache-dir", type=Path, help="prepared-model cache")
    ap.add_argument("--mode", choices=["race", "fair", "three-way"], default="fair",
                    help="race: both at once; fair: each alone (default); three-way: baseline, draft, prompt lookup")
    ap.add_argument("--prompt-lookup", action="store_true", help="race/fair: speculate with prompt lookup, no draft")
    ap.add_argument("--assistant-tokens", type=int, help="guesses per main-model step (default: the preset's)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    return ap


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(lambda: _record(args))


def _record(args) -> int:
    from .core.settings import GenerationSettings
    from .core.streaming import DoneEvent, StatusEvent
    from .engine import three_way
    from .engine.arena import Arena, RaceRequest
    from .records import outcomes, playback, recording

    if args.out.suffix != ".json":
        raise DemoError(f"{args.out} does not end in .json; name the recording e.g. recordings/my-race.json.")
    arena = Arena.create(args.models, args.cache_dir)
    preset = arena.presets.get(args.preset)
    k = args.assistant_tokens or arena.default_assistant_tokens(preset.name, "fair")
    three = args.mode == "three-way"
    settings = GenerationSettings(max_new_tokens=args.max_new_tokens, assistant_tokens=k,
                                  method="prompt_lookup" if args.prompt_lookup and not three else "draft").validated()
    request = RaceRequest(prompt=args.prompt, preset=preset.name, settings=settings,
                          mode="fair" if three else args.mode)
    stop = threading.Event()
    events = three_way.run(arena, request, stop) if three else arena.run(request, stop)
    results, said = {}, None
    for event in events:
        if isinstance(event, StatusEvent):
            if event.message != said:  # a job waiting in line repeats its status (demo.engine.waiting)
                print(f"[{event.message}]", file=sys.stderr, flush=True)
                said = event.message
        elif isinstance(event, DoneEvent):
            results[event.side] = event.result
            r = event.result
            state = f"failed: {r.error}" if r.error else f"{len(r.token_ids)} tokens in {r.end - r.start:.2f} s"
            print(f"[{event.side}: {state}]", file=sys.stderr, flush=True)
    how = three_way.how_it_ran(request, arena.options_for(request)) if three else arena.summarize(results, request).how
    outcome = outcomes.after_race(arena, request, results, how, scoreboard=None,
                                  kind="three-way" if three else "race")
    if outcome is None:
        errors = "; ".join(f"{side}: {r.error}" for side, r in results.items() if r.error) or "stopped"
        raise DemoError(f"The race did not finish ({errors}), so nothing was recorded; run it again.")
    if outcome.recording is None:
        raise DemoError(outcome.warning or "The race could not be recorded.")
    path = recording.save(outcome.recording, args.out)
    rec = outcome.recording
    print(f"recorded {playback.title(rec)} on {playback.machine_label(rec)} -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
