"""The headline in race mode, measured the way a visitor's race runs: both sides at once, each on
its half of the cores, through the page's own path (Arena.run with mode "race", the calibrated race
pair and K, the race baseline calibration chose), on the held-out headline prompts, several rounds.
scripts/headline.py measures fair mode (each side alone, the whole machine); the two together are
what BENCHMARKS.md's current section quotes for a CPU class.

    python -m demo.calibrate                 # once: the calibrated race defaults
    python scripts/race_headline.py [--preset NAME] [--prompts 3] [--rounds 3] [--json PATH]

A race is its own paired sample: both sides share the same seconds of the machine, so drift hits
them alike. Two ratios per race: the page's speedup (tokens over wall-clock seconds, the prefill
included: what the visitor reads) and the decode-rate ratio at equal token counts (tokens after the
first over the time after the first, both answers cut at the shorter). llama.cpp is not raced
here: race mode splits the cores between two OpenVINO pipelines, and llama.cpp has no half to take.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from demo.core.bench_prompts import HEADLINE_SET, held_out, named  # noqa: E402
from demo.core.errors import DemoError, run_command  # noqa: E402
from demo.core.machine import machine_info  # noqa: E402
from demo.core.settings import GenerationSettings  # noqa: E402
from demo.core.streaming import BASELINE, SPECULATIVE, DoneEvent  # noqa: E402
from demo.engine.arena import Arena, RaceRequest  # noqa: E402
from demo.engine.request import side_configs  # noqa: E402
from lab.headlines import add_common_arguments, calibrated  # noqa: E402
from lab.paired import decode_rate, paired, spread, token_times  # noqa: E402


def one_race(arena: Arena, request: RaceRequest) -> dict:
    """Run one race on the page's path; the two sides' results and the page's summary."""
    results = {}
    for event in arena.run(request):
        if isinstance(event, DoneEvent):
            results[event.side] = event.result
    errors = {side: r.error for side, r in results.items() if r.error}
    if set(results) != {BASELINE, SPECULATIVE} or errors:
        raise DemoError(f"The race did not finish on both sides: {errors or sorted(results)}.")
    return {"results": results, "summary": arena.summarize(results, request)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_arguments(ap)
    args = ap.parse_args()

    def body() -> int:
        arena, preset, k = calibrated(args.preset, args.cache_dir, "race")
        prompts = held_out(named(HEADLINE_SET[:args.prompts]))
        info = machine_info()
        print(f"CPU: {info.get('cpu_model')}; flags {' '.join(info.get('isa_flags', []))}", flush=True)

        def request(text: str, tokens: int = args.max_new_tokens) -> RaceRequest:
            return RaceRequest(prompt=text, preset=preset.name, mode="race",
                               settings=GenerationSettings(max_new_tokens=tokens, assistant_tokens=k))

        one_race(arena, request(prompts[0].text, 8))  # loads both sides and compiles their kernels
        probe = request("x")  # what each side runs, as the page's summary says it
        pair = arena.prepared(probe)
        configs = side_configs({"main": pair.main_format, "draft": pair.draft_format,
                                "baseline": pair.baseline_main_format},
                               arena.options_for(probe).with_threads(arena.threads_to_use(probe, pair)),
                               probe.settings.method, k)
        for side, words in configs.items():
            print(f"{side}: {words}", flush=True)
        samples = []
        for r in range(args.rounds):
            for p in prompts:
                race = one_race(arena, request(p.text))
                summary, results = race["summary"], race["results"]
                times = {side: token_times(results[side]) for side in (BASELINE, SPECULATIVE)}
                decode = paired([{"round": r, "prompt": p.id, "times": times}], SPECULATIVE, BASELINE)
                samples.append({"round": r, "prompt": p.id, "times": times,
                                "speedup": summary.speedup, "verdict": summary.verdict,
                                "tok_s": {BASELINE: summary.baseline.tokens_per_s,
                                          SPECULATIVE: summary.speculative.tokens_per_s},
                                "decode_ratio": decode[0]["ratio"] if decode else None})
                print(f"round {r + 1} {p.id}: {summary.speedup:.2f}× ({summary.speculative.tokens_per_s:.1f} vs "
                      f"{summary.baseline.tokens_per_s:.1f} tok/s, the page's speedup); decode "
                      f"{decode_rate(times[SPECULATIVE]) or 0:.1f} vs {decode_rate(times[BASELINE]) or 0:.1f} tok/s; "
                      f"{summary.verdict}", flush=True)
        result = {
            "speedup": spread([s["speedup"] for s in samples]),
            "decode_ratio": spread([s["decode_ratio"] for s in samples if s["decode_ratio"]]),
            BASELINE: {"tok_s": spread([s["tok_s"][BASELINE] for s in samples])},
            SPECULATIVE: {"tok_s": spread([s["tok_s"][SPECULATIVE] for s in samples])},
        }
        for name in ("speedup", "decode_ratio"):
            s = result[name]
            print(f"{name}: {s['median']:.2f}× (median of {s['n']} races; range {s['min']:.2f}–{s['max']:.2f})")
        if args.json:
            args.json.write_text(json.dumps({
                "machine": info, "preset": preset.name, "mode": "race", "k": k, "labels": configs,
                "prompts": [p.id for p in prompts], "rounds": args.rounds, "max_new_tokens": args.max_new_tokens,
                "summary": result, "samples": samples}, indent=1))
        arena.cache.clear()
        return 0

    return run_command(body)


if __name__ == "__main__":
    sys.exit(main())
