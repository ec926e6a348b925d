"""Command-line speculative decoding, like OpenVINO GenAI's speculative_decoding_lm sample,
with the baseline beside it.

    python -m demo.cli MAIN_DIR DRAFT_DIR "prompt"
    python -m demo.cli --preset qwen2.5-coder-embedded "prompt"
    python -m demo.cli --preset smollm2-self-draft --prompt-lookup "prompt"
    python -m demo.cli --eagle3 MAIN_DIR HEAD_DIR "prompt"   # an EAGLE-3 head as the draft
    python -m demo.cli --preset qwen2.5-coder-embedded --free-draft "prompt"   # the own verify loop

Streams the speculative output, then prints both pipelines' numbers.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path
from typing import NamedTuple, Optional

from .core import placement
from .core.errors import DemoError, run_command
from .core.settings import FREE_DRAFT, GenerationSettings, PipelineOptions, cpu_cores
from .core.streaming import BASELINE, SPECULATIVE, ChunkEvent, DoneEvent
from .engine.race import fair, race
from .engine.request import side_configs


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m demo.cli", description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="*", help="MAIN_DIR [DRAFT_DIR] PROMPT, or only PROMPT with --preset")
    ap.add_argument("--preset", help="a preset from models.yaml instead of MAIN_DIR/DRAFT_DIR")
    ap.add_argument("--models", type=Path, help="path to models.yaml")
    ap.add_argument("--cache-dir", type=Path, help="prepared-model cache")
    ap.add_argument("--device", default="CPU", help="main model device (default CPU)")
    ap.add_argument("--draft-device", default="CPU", help="draft model device (default CPU)")
    k = ap.add_mutually_exclusive_group()
    k.add_argument("--num-assistant-tokens", type=int, help="guesses per main-model step (K)")
    k.add_argument("--assistant-confidence-threshold", type=float, help="draft until less sure than this")
    method = ap.add_mutually_exclusive_group()
    method.add_argument("--prompt-lookup", action="store_true", help="guess by matching n-grams of the prompt; no draft")
    method.add_argument("--free-draft", action="store_true",
                        help="near-free guesses (n-grams of the prompt and answer, a datastore of code, the main's own "
                             "earlier predictions) in the arena's own verify loop on OpenVINO Runtime; no draft")
    method.add_argument("--eagle3", action="store_true",
                        help="DRAFT_DIR is an EAGLE-3 head (exported by optimum-intel) drafting from the main's hidden states")
    ap.add_argument("--branching-factor", type=int, help="EAGLE-3 tree drafting: candidates kept per node and layer")
    ap.add_argument("--tree-depth", type=int, help="EAGLE-3 tree drafting: layers of the candidate tree")
    ap.add_argument("--cache-size", type=int, default=1, help="KV cache size in GB (default 1)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--sample", action="store_true", help="sample (temperature/top-p) instead of greedy")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--top-p", type=float, default=0.9)
    ap.add_argument("--exact", action="store_true", help="f32 everywhere: greedy outputs must match exactly")
    ap.add_argument("--mode", choices=["race", "fair"], default="fair",
                    help="fair: each pipeline alone (true ratio, default); race: both at once")
    return ap


class Resolved(NamedTuple):
    main: Path
    draft: Optional[Path]
    prompt: str
    default_k: int
    baseline: Optional[Path]  # the baseline's own main, where it reads other weights
    formats: dict              # what each role reads, in words (side_configs)
    precision: str = "f32"     # the activation precision this machine's calibration chose
    baseline_attention: str = "PA"


def _resolve(args) -> Resolved:
    """The folders, prompt and default K from positional paths or a preset. A preset runs
    what the page would for this mode: the calibrated pair at its precision, and the
    baseline this machine measured fastest without a draft, on its attention backend."""
    if args.preset:
        if len(args.paths) != 1:
            raise DemoError("With --preset, give only the prompt as an argument.")
        from .engine.arena import Arena, RaceRequest, weights_note

        arena = Arena.create(args.models, args.cache_dir)
        heads = arena.presets.get(args.preset).drafts_with_eagle3
        if args.eagle3 and not heads:
            raise DemoError(f"The preset {args.preset!r} has no EAGLE-3 head; choose one whose draft is a head "
                            "(qwen3-1.7b-eagle3) or give --eagle3 MAIN_DIR HEAD_DIR PROMPT.")
        args.eagle3 = heads and not (args.prompt_lookup or args.free_draft)  # a head's preset races its head
        request = RaceRequest(prompt=args.paths[0], preset=args.preset, mode=args.mode,
                              options=PipelineOptions(exact=args.exact))
        pair = arena.prepare(args.preset, lambda m: print(f"[{m}]", file=sys.stderr), **arena.formats_for(request))
        if pair.baseline is not None:
            print(f"[{weights_note(pair, args.mode)}]", file=sys.stderr)  # the speedup below is against it
        planned = arena.options_for(request)
        return Resolved(pair.main, pair.draft, args.paths[0], arena.default_assistant_tokens(pair.preset.name, args.mode),
                        pair.baseline, {"main": pair.main_format, "draft": pair.draft_format,
                                        "baseline": pair.baseline_main_format},
                        planned.cpu_precision, planned.baseline_attention)
    draftless = args.prompt_lookup or args.free_draft
    need = 2 if draftless else 3
    if len(args.paths) != need:
        usage = "MAIN_DIR PROMPT" if draftless else ("MAIN_DIR HEAD_DIR PROMPT" if args.eagle3
                                                              else "MAIN_DIR DRAFT_DIR PROMPT")
        raise DemoError(f"Give {usage} (or --preset NAME PROMPT).")
    from .models.sources import is_ir_folder

    dirs = [Path(p) for p in args.paths[:-1]]
    for d in dirs:
        if not is_ir_folder(d):
            raise DemoError(f"{d} is not an OpenVINO IR folder; export one with optimum-cli export openvino.")
    return Resolved(dirs[0], (dirs[1] if len(dirs) > 1 else None), args.paths[-1], 5, None,
                    {"main": dirs[0].name, "draft": dirs[1].name if len(dirs) > 1 else None})


def _method(args) -> str:
    if args.prompt_lookup:
        return "prompt_lookup"
    if args.free_draft:
        return FREE_DRAFT
    return "eagle3" if args.eagle3 else "draft"


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_intermixed_args(argv)  # paths may come before and after flags
    return run_command(lambda: _run(args))


def _run(args) -> int:
    from .core.metrics import compare, side_stats
    from .engine.arena import validate_prompt
    from .engine.pipelines import PipelineCache

    resolved = _resolve(args)
    main_dir, draft_dir, prompt, baseline_dir = resolved.main, resolved.draft, resolved.prompt, resolved.baseline
    validate_prompt(prompt)
    threshold = args.assistant_confidence_threshold
    settings = GenerationSettings(
        max_new_tokens=args.max_new_tokens,
        method=_method(args),
        branching_factor=args.branching_factor, tree_depth=args.tree_depth,
        assistant_tokens=None if threshold is not None else (args.num_assistant_tokens or resolved.default_k),
        confidence_threshold=threshold,
        sampling=args.sample, temperature=args.temperature, top_p=args.top_p,
    ).validated()
    options = PipelineOptions(args.device, args.draft_device, exact=args.exact, cache_size_gb=args.cache_size
                              ).with_precision(resolved.precision).with_baseline_attention(resolved.baseline_attention)
    placement.check_options(options, settings)
    if args.mode == "race":
        options = options.with_threads(placement.split_threads(cpu_cores(), options, settings.method))
    for note in placement.notes(options, settings.method):
        print(f"[{note}]", file=sys.stderr)
    print("[loading and warming up both pipelines]", file=sys.stderr)
    cache = PipelineCache()
    load = cache.get if args.mode == "race" else cache.fair  # fair: one side at a time if both do not fit
    runners = load(main_dir, draft_dir, settings.method, options, lambda m: print(f"[{m}]", file=sys.stderr),
                   baseline=baseline_dir)
    stream = race if args.mode == "race" else fair
    results = {}
    stop = threading.Event()
    for event in stream(runners, prompt, settings, stop):
        if isinstance(event, ChunkEvent) and event.side == SPECULATIVE:
            print(event.chunk.text, end="", flush=True)
        elif isinstance(event, DoneEvent):
            results[event.side] = event.result
    print()
    configs = side_configs(resolved.formats, options, settings.method, settings.assistant_tokens, threshold)
    for side in (BASELINE, SPECULATIVE):
        r = results[side]
        print(f"{side:12s} ran {configs[side]}")
        if r.error:
            print(f"{side}: failed: {r.error}")
            continue
        st = side_stats(r.chunks, r.start, r.end)
        print(f"{side:12s} {st.tokens:4d} tokens in {st.elapsed_s:6.2f} s = {st.tokens_per_s:6.1f} tok/s"
              f"  TTFT {st.ttft_s * 1000:6.0f} ms  TPOT {st.tpot_ms or 0:6.1f} ms"
              f"  {st.tokens_per_step:.2f} tokens/verify step"
              + (f"  (OpenVINO: TTFT {r.ov_ttft_ms:.0f} ms, TPOT {r.ov_tpot_ms:.1f} ms)" if r.ov_ttft_ms else ""))
    b, s = results[BASELINE], results[SPECULATIVE]
    if not (b.error or s.error):
        c = compare(b, s)
        rate = c.acceptance_rate
        rate_text = (f"acceptance rate {rate * 100:.0f}% ({c.ov_accepted} of {c.ov_drafted} guesses, OpenVINO's count "
                     "without the last step)" if rate is not None else "no acceptance rate")
        speedup_text = f"speedup {c.speedup:.2f}x" if c.speedup is not None else "no speedup (a side made no token)"
        print(f"{speedup_text} ({args.mode} mode); {c.speculative.accepted} guesses accepted in "
              f"{c.speculative.steps} verify steps; "
              f"{rate_text}; outputs {c.verdict}")
    return 0



if __name__ == "__main__":
    sys.exit(main())
