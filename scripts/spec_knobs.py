"""Experiment (BENCHMARKS.md, issue 20): what a knob of the speculative pipeline buys, side by
side with the main model alone, in one run.

Builds the pipelines the way the arena does in fair mode (one scheduler config for every
pipeline: demo.core.placement.SchedulerSettings; OpenVINO's default threads), then answers
the benchmark's code prompts greedily with each variant, the variants interleaved prompt by
prompt and round by round (the box drifts 10-20 % from minute to minute), one pipeline in
memory at a time per round. Each run's decode speed is the tokens after the first over the
time after the first token; its step split comes from OpenVINO's own per-model metrics.

    python scripts/spec_knobs.py --main MAIN_IR --draft DRAFT_IR --k 6 \
        --variant base='{}' --variant spec='{}' --variant spec-s1='{"sampler_num_threads": 1}' \
        --json bench-results/spec-knobs.json

A variant named base* is the main model alone; any other is speculative with that K. Its
JSON holds extra properties for both constructors ("draft:" prefixed keys go to the draft
only, "main:" to the main only), and "@draft" names another draft folder.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from demo.core.bench_prompts import select  # noqa: E402
from demo.core.machine import machine_info  # noqa: E402
from demo.core.placement import SchedulerSettings  # noqa: E402


def build(main: Path, draft: Path, props: dict, speculative: bool):
    import openvino_genai as ov

    props = dict(props)
    draft = Path(props.pop("@draft", draft))
    s = SchedulerSettings(cache_size_gb=1)
    config = ov.SchedulerConfig()
    config.cache_size = s.cache_size_gb
    config.max_num_batched_tokens = s.max_num_batched_tokens
    config.dynamic_split_fuse = s.dynamic_split_fuse
    config.enable_prefix_caching = s.enable_prefix_caching
    main_props = {k.split(":", 1)[-1]: v for k, v in props.items() if not k.startswith("draft:")}
    draft_props = {k.split(":", 1)[-1]: v for k, v in props.items() if not k.startswith("main:")}
    if not speculative:
        return ov.LLMPipeline(str(main), "CPU", scheduler_config=config, **main_props)
    return ov.LLMPipeline(str(main), "CPU", scheduler_config=config,
                          draft_model=ov.draft_model(str(draft), "CPU", **draft_props), **main_props)


def run_once(pipe, prompt: str, k: int, new_tokens: int, speculative: bool) -> dict:
    import openvino_genai as ov

    cfg = ov.GenerationConfig()
    cfg.max_new_tokens = new_tokens
    cfg.do_sample = False
    cfg.ignore_eos = True
    if speculative:
        cfg.num_assistant_tokens = k
    stamps = []

    def streamer(_chunk):
        stamps.append(time.perf_counter())
        return ov.StreamingStatus.RUNNING

    tok = pipe.get_tokenizer()
    text = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True)
    t0 = time.perf_counter()
    result = pipe.generate([text], cfg, streamer)
    t1 = time.perf_counter()
    out = {"tokens": new_tokens, "wall_s": t1 - t0, "first_token_s": stamps[0] - t0 if stamps else None,
           "decode_tok_s": (new_tokens - 1) / (t1 - stamps[0]) if stamps else None, "chunks": len(stamps)}
    if speculative:
        em = result.extended_perf_metrics
        try:
            out["main_infer_s"] = sum(em.main_model_metrics.raw_metrics.m_durations) / 1e6
            out["draft_infer_s"] = sum(em.draft_model_metrics.raw_metrics.m_durations) / 1e6
            out["accepted"] = em.get_num_accepted_tokens()
        except Exception as e:  # noqa: BLE001 - an experiment reports what it can
            out["metrics_error"] = str(e)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--main", required=True, type=Path)
    ap.add_argument("--draft", required=True, type=Path)
    ap.add_argument("--k", type=int, default=6)
    ap.add_argument("--variant", action="append", required=True, metavar="NAME=JSON")
    ap.add_argument("--prompts", type=int, default=2, help="code prompts")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    variants = {}
    for v in args.variant:
        name, _, props = v.partition("=")
        variants[name] = json.loads(props or "{}")
    prompts = [p.text for p in select(["code"], args.prompts)]
    info = machine_info()
    print(f"CPU: {info.get('cpu_model')}; flags {' '.join(info.get('isa_flags', []))}", flush=True)
    runs = {name: [] for name in variants}
    for r in range(args.rounds):
        for name, props in variants.items():
            spec = not name.startswith("base")
            pipe = build(args.main, args.draft, props, spec)
            run_once(pipe, prompts[0], args.k, 16, spec)  # untimed: first-run kernel compilation
            for p in prompts:
                out = run_once(pipe, p, args.k, args.max_new_tokens, spec)
                runs[name].append(out)
                print(f"round {r + 1} {name:>12}: {out['decode_tok_s']:.2f} tok/s decode, "
                      f"{out['chunks']} chunks, wall {out['wall_s']:.2f} s"
                      + (f", main {out.get('main_infer_s', 0):.2f} s draft {out.get('draft_infer_s', 0):.2f} s"
                         if spec else ""), flush=True)
            del pipe
            gc.collect()
    base = [n for n in variants if n.startswith("base")]
    ref = statistics.median(x["decode_tok_s"] for x in runs[base[0]]) if base else None
    summary = {}
    for name, rs in runs.items():
        med = statistics.median(x["decode_tok_s"] for x in rs)
        summary[name] = {"median_decode_tok_s": med, "vs_" + (base[0] if base else "none"): med / ref if ref else None}
        print(f"{name:>12}: median {med:.2f} tok/s" + (f"  ({med / ref:.2f}x {base[0]})" if ref else ""))
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "k": args.k, "variants": variants, "summary": summary,
                                         "runs": runs, "max_new_tokens": args.max_new_tokens}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
