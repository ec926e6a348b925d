"""Time to first token of a long prompt repeated three times on both sides, as the arena
builds them (demo.engine.pipelines): a prefix cache on one side only shows as a repeat far faster
than its first run there and not on the other side.

    python scripts/experiments/repeat_ttft.py [--preset NAME] [--threads 1] [--json OUT.json]

Prints OpenVINO's own TTFT (perf_metrics) per run and side, and writes them with the
machine's CPU flags.
"""

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from demo.core.machine import machine_info  # noqa: E402


def long_prompt(words: int = 650) -> str:
    lines = [f"2026-12-01 12:{i % 60:02d}:00 worker-{i % 7} finished job {i} in {i % 13}.{i % 10} s"
             for i in range(words // 9)]
    return "Summarize this log in one sentence.\n" + "\n".join(lines)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset")
    ap.add_argument("--threads", type=int, default=1, help="per pipeline, as in a race (0: OpenVINO's default)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    from demo.core.placement import scheduler_settings
    from demo.core.settings import GenerationSettings, PipelineOptions
    from demo.core.streaming import SIDES
    from demo.engine.arena import Arena, RaceRequest

    arena = Arena.create()
    request = RaceRequest(prompt="x", preset=args.preset)
    pair = arena.prepare(request.preset)
    options = PipelineOptions(threads=args.threads or None)
    runners = arena.cache.get(pair.main, pair.draft, "draft", options)
    prompt = long_prompt()
    n_tokens = runners["baseline"].count_tokens(runners["baseline"].template(prompt))
    settings = GenerationSettings(max_new_tokens=8, assistant_tokens=3)
    ttft = {side: [round(runners[side].run(prompt, settings, lambda c: True).ov_ttft_ms, 1) for _ in range(3)]
            for side in SIDES}
    info = machine_info()
    result = {"preset": pair.preset.name, "prompt_tokens": n_tokens, "threads": args.threads,
              "main_format": pair.main_format, "draft_format": pair.draft_format,
              "scheduler": scheduler_settings(options).describe(), "ttft_ms": ttft, "machine": info}
    for side, values in ttft.items():
        print(f"{side:12s} TTFT ms: {' / '.join(f'{v:,.0f}' for v in values)}")
    print(f"{n_tokens}-token prompt, {args.threads or 'default'} thread(s); CPU {info['cpu_model']}: "
          f"{' '.join(info['isa_flags'])}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
