"""Issue 20's headline, side by side in one run: the speculative side with this machine's
calibrated fair defaults against the fastest main alone that calibration found, and against
llama.cpp's plain decoding of the same GGUF main model.

    pip install llama-cpp-python            # the outside reference (compiles llama.cpp)
    python -m demo.calibrate                # once: the calibrated defaults
    python scripts/headline.py [--preset NAME] [--prompts 2] [--rounds 2] [--json PATH]

Every round runs the arena's own benchmark in fair mode (demo.bench.run_bench: each pipeline
alone with every core, greedy, the benchmark's code prompts, whole answers timed with their
prefill) and then llama.cpp on the same prompts with the same chat template, so drift on a
noisy machine hits every engine alike. All three are counted the same way: tokens of the
answer over the wall time of the whole request. The decode-only rate (tokens after the first
over the time after the first token) is printed too.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from demo.bench.measure import run_bench  # noqa: E402
from demo.bench.plan import weights_label  # noqa: E402
from demo.bench.report import headline  # noqa: E402
from demo.core.bench_prompts import select  # noqa: E402
from demo.core.errors import DemoError, run_command  # noqa: E402
from demo.core.machine import machine_info  # noqa: E402
from demo.core.settings import cpu_cores  # noqa: E402
from demo.engine.arena import Arena  # noqa: E402
from demo.engine.pipelines import PipelineCache  # noqa: E402
from demo.models.calibration_store import load_cached  # noqa: E402
from demo.models.presets import PypiSource, load_presets  # noqa: E402
from demo.models.sources import ModelStore  # noqa: E402
from llamacpp_reference import assemble, llama_class  # noqa: E402


def decode_rate(side) -> float | None:
    if side.tokens < 2 or side.elapsed_s is None or side.ttft_s is None or side.elapsed_s <= side.ttft_s:
        return None
    return (side.tokens - 1) / (side.elapsed_s - side.ttft_s)


def llama_answer(llm, prompt: str, max_new_tokens: int) -> dict:
    t0 = time.perf_counter()
    first = None
    n = 0
    for chunk in llm.create_chat_completion([{"role": "user", "content": prompt}], max_tokens=max_new_tokens,
                                            temperature=0, stream=True):
        if chunk["choices"][0]["delta"].get("content"):
            n += 1  # one streamed piece per generated token
            if first is None:
                first = time.perf_counter()
    wall = time.perf_counter() - t0
    return {"tokens": n, "elapsed_s": wall, "tokens_per_s": n / wall,
            "decode_tok_s": (n - 1) / (t0 + wall - first) if first is not None and n > 1 else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="qwen2.5-coder-embedded")
    ap.add_argument("--prompts", type=int, default=2, help="code prompts per round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--cache-dir", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    def body() -> int:
        Llama = llama_class()
        arena = Arena(load_presets(None), ModelStore(args.cache_dir), PipelineCache(max_pairs=1))
        preset = arena.presets.get(args.preset)
        calibration = load_cached(arena.store, preset)
        if calibration is None or "fair" not in calibration.choice:
            raise DemoError(f"This machine has no calibration of {preset.name}; run: python -m demo.calibrate "
                            f"--preset {preset.name}")
        if not isinstance(preset.main, PypiSource):
            raise DemoError(f"Preset {preset.name!r} has no GGUF main model shipped on PyPI for llama.cpp.")
        choice, fastest = calibration.choice["fair"], calibration.fastest_alone.main_format
        pairs = [(choice.main_format, choice.draft_format)]
        if fastest != choice.main_format:
            pairs.append((fastest, choice.draft_format))  # its baseline side is the fastest main alone
        spec_label, alone_label = weights_label(pairs[0]), weights_label(pairs[-1])
        prompts = select(["code"], args.prompts)
        info = machine_info()
        print(f"CPU: {info.get('cpu_model')}; flags {' '.join(info.get('isa_flags', []))}", flush=True)
        print(f"calibrated fair choice: {spec_label} K={choice.k}; fastest main alone: {fastest}", flush=True)
        rows: dict[str, list[dict]] = {"speculative": [], "main_alone": [], "llama_cpp": []}
        with tempfile.TemporaryDirectory() as tmp:
            gguf = assemble(preset.main, Path(tmp) / "main.gguf")
            llm = Llama(model_path=str(gguf), n_threads=cpu_cores(), n_ctx=2048, verbose=False, seed=0)
            llama_answer(llm, "Hi", 4)  # warm-up
            for r in range(args.rounds):
                bench = run_bench(preset.name, modes=["fair"], assistant_tokens=[choice.k], repeat=1,
                                  prompts=prompts, max_new_tokens=args.max_new_tokens, arena=arena, formats=pairs)
                for s in bench.samples:
                    if s.weights == spec_label:
                        rows["speculative"].append({"round": r, "prompt": s.prompt_id,
                                                    "tokens_per_s": s.speculative.tokens_per_s,
                                                    "decode_tok_s": decode_rate(s.speculative),
                                                    "tokens": s.speculative.tokens,
                                                    "tokens_per_step": s.speculative.tokens_per_step})
                    if s.weights == alone_label:
                        rows["main_alone"].append({"round": r, "prompt": s.prompt_id,
                                                   "tokens_per_s": s.baseline.tokens_per_s,
                                                   "decode_tok_s": decode_rate(s.baseline),
                                                   "tokens": s.baseline.tokens})
                for p in prompts:
                    rows["llama_cpp"].append({"round": r, "prompt": p.id,
                                              **llama_answer(llm, p.text, args.max_new_tokens)})
                for name in rows:
                    last = [x for x in rows[name] if x["round"] == r]
                    print(f"round {r + 1} {name:>11}: " + ", ".join(f"{x['tokens_per_s']:.2f}" for x in last)
                          + " tok/s", flush=True)
        summary, ratios = headline(rows)
        for name, s in summary.items():
            print(f"{name:>11}: {s['median_tok_s']:6.2f} tok/s whole answer, {s['median_decode_tok_s']:6.2f} decode")
        print(f"speculative ({spec_label}, K={choice.k}) = {ratios['vs_main_alone']:.2f}x the fastest main alone "
              f"({fastest}), {ratios['vs_llama_cpp']:.2f}x llama.cpp ({cpu_cores()} threads)")
        if args.json:
            args.json.write_text(json.dumps({
                "machine": info, "preset": preset.name, "choice": choice.model_dump(), "fastest_alone": fastest,
                "prompts": [p.id for p in prompts], "rounds": args.rounds, "max_new_tokens": args.max_new_tokens,
                "summary": summary, "ratios": ratios, "runs": rows}, indent=1))
        return 0

    return run_command(body)


if __name__ == "__main__":
    sys.exit(main())
