"""Experiment (BENCHMARKS.md, issue 20): what a knob of the speculative pipeline buys, side by
side with the main model alone, in one run.

Builds the pipelines the way the arena does in fair mode (one scheduler config for every
pipeline: demo.core.placement.SchedulerSettings; OpenVINO's default threads), then answers
the benchmark's code prompts greedily with each variant, the variants interleaved round by
round (the box drifts 10-20 % from minute to minute), their order reversed every other round
(ABBA: use an even number of rounds), one pipeline in memory at a time, after an untimed pass
of the first variant over every prompt. Ratios are paired by round and prompt, with the
first base* variant (the main alone), or with the first variant where there is none. Each run's
decode speed is the tokens after the first over the time after the first token; its step
split comes from OpenVINO's own per-model metrics.

    python scripts/experiments/spec_knobs.py --main MAIN_IR --draft DRAFT_IR --k 6 \
        --variant base='{}' --variant spec='{}' --variant spec-s1='{"sampler_num_threads": 1}' \
        --json bench-results/spec-knobs.json

A variant named base* is the main model alone; any other is speculative with that K. Its
JSON holds extra properties for both constructors ("draft:" prefixed keys go to the draft
only, "main:" to the main only), "@draft" or "@main" names another draft or main folder, and
"@threshold" drafts on OpenVINO GenAI's assistant_confidence_threshold instead of K guesses.
Tokens are streamed as ids, as the arena streams them; "@streamer": "text" streams text
through a Python callback instead (OpenVINO GenAI then detokenizes every token).
"@backend": "SDPA" builds the main alone on OpenVINO GenAI's stateful backend (no scheduler, no
paged attention: ATTENTION_BACKEND=SDPA, no scheduler config, no sampler threads), the plain
configuration the arena uses only beside an NPU; each answer's token ids are kept so that the
two backends' answers can be compared.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from demo.core.bench_prompts import select  # noqa: E402
from demo.core.machine import machine_info  # noqa: E402
from demo.core.placement import SchedulerSettings  # noqa: E402


def build(main: Path, draft: Path, props: dict, speculative: bool):
    import openvino_genai as ov

    props = dict(props)
    draft = Path(props.pop("@draft", draft))
    main = Path(props.pop("@main", main))
    if props.pop("@backend", "PA") == "SDPA":
        if speculative:
            raise SystemExit("@backend SDPA: OpenVINO GenAI drafts on CPU only with paged attention")
        props.pop("sampler_num_threads", None)  # a scheduler's setting; the stateful backend has none
        return ov.LLMPipeline(str(main), "CPU", **{**props, "ATTENTION_BACKEND": "SDPA"})
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


def round_order(names: list, round_index: int) -> list:
    """ABBA: odd rounds run the variants in reverse. In one order for every round, a drift
    across the minutes a round takes would be read as the later variant's gain (pairing by
    prompt does not remove it); reversed every other round, it cancels over an even number of
    rounds."""
    return names[::-1] if round_index % 2 else list(names)


def paired_ratios(runs: list, reference: list) -> list:
    """Decode-rate ratios of two variants' runs taken in the same round on the same prompt
    (both lists in the order they were run: round by round, prompt by prompt)."""
    return [x["decode_tok_s"] / y["decode_tok_s"] for x, y in zip(runs, reference, strict=True)]


def run_once(pipe, prompt: str, k: int, new_tokens: int, speculative: bool, threshold=None,
             text_streamer: bool = False) -> dict:
    import openvino_genai as ov

    cfg = ov.GenerationConfig()
    cfg.max_new_tokens = new_tokens
    cfg.do_sample = False
    cfg.ignore_eos = True
    if speculative and threshold is not None:
        cfg.assistant_confidence_threshold = float(threshold)
    elif speculative:
        cfg.num_assistant_tokens = k
    stamps = []
    ids: list[int] = []

    class Streamer(ov.StreamerBase):
        """Token ids, as the arena streams them (demo.engine.openvino_runner). With a text
        callback OpenVINO GenAI detokenizes every token (the main alone took 1.07x as long on
        a Zen 5) and holds the first tokens back (a speculative rate counted from the first
        callback read high): their ratio came out a tenth too high (BENCHMARKS.md)."""

        def write(self, token):
            stamps.append(time.perf_counter())
            ids.extend(token if isinstance(token, list) else [token])
            return ov.StreamingStatus.RUNNING

        def end(self):
            pass

    def text_callback(_text):
        stamps.append(time.perf_counter())
        return ov.StreamingStatus.RUNNING

    streamer = text_callback if text_streamer else Streamer()

    tok = pipe.get_tokenizer()
    text = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True)
    t0 = time.perf_counter()
    result = pipe.generate([text], cfg, streamer)
    t1 = time.perf_counter()
    out = {"tokens": new_tokens, "wall_s": t1 - t0, "first_token_s": stamps[0] - t0 if stamps else None,
           "decode_tok_s": (new_tokens - 1) / (t1 - stamps[0]) if stamps else None, "chunks": len(stamps), "ids": ids}
    if speculative:
        em = result.extended_perf_metrics
        try:
            main_us = list(em.main_model_metrics.raw_metrics.m_durations)
            draft_us = list(em.draft_model_metrics.raw_metrics.m_durations)
            out["main_infer_s"] = sum(main_us) / 1e6
            out["draft_infer_s"] = sum(draft_us) / 1e6
            out["accepted"] = em.get_num_accepted_tokens()
            # Where a step's time goes: the whole request (its prefill included, which adds a
            # few ms a step) over its steps, split into the main's inferences, the draft's, and
            # the rest (sampling, validation, scheduling, copies). OpenVINO's per-model
            # durations cover every inference; the wall time covers everything.
            steps = max(1, len(main_us) - 1)  # one verify per step after the prefill
            out["steps"] = steps
            out["step_ms"] = {
                "wall": (t1 - t0) * 1e3 / steps,
                "main": sum(main_us) / 1e3 / steps,
                "draft": sum(draft_us) / 1e3 / steps,
            }
            out["step_ms"]["rest"] = out["step_ms"]["wall"] - out["step_ms"]["main"] - out["step_ms"]["draft"]
        except Exception as e:  # noqa: BLE001 - an experiment reports what it can
            out["metrics_error"] = str(e)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--main", required=True, type=Path)
    ap.add_argument("--draft", required=True, type=Path)
    ap.add_argument("--k", default="6", help="assistant tokens, one or a list (2,4,6,8): every speculative "
                    "variant runs at each")
    ap.add_argument("--variant", action="append", required=True, metavar="NAME=JSON")
    ap.add_argument("--prompts", type=int, default=2, help="code prompts")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    ks = [int(k) for k in str(args.k).split(",")]
    variants = {}  # name -> (properties, K or None for the main alone)
    for v in args.variant:
        name, _, props = v.partition("=")
        if name.startswith("base"):
            variants[name] = (json.loads(props or "{}"), None)
        else:
            for k in ks:
                variants[name if len(ks) == 1 else f"{name}@K{k}"] = (json.loads(props or "{}"), k)
    prompts = [p.text for p in select(["code"], args.prompts)]
    info = machine_info()
    print(f"CPU: {info.get('cpu_model')}; flags {' '.join(info.get('isa_flags', []))}", flush=True)
    runs = {name: [] for name in variants}
    # Untimed: in an A/A test (BENCHMARKS.md) the first variant's first round, the process's
    # first minute of decoding, read up to 1.3x slower than the same configuration after it.
    def open_variant(name: str):
        """The variant's pipeline and how it answers: run(prompt, tokens) -> run_once's dict."""
        props, k = variants[name]
        props = dict(props)
        threshold = props.pop("@threshold", None)
        text_streamer = props.pop("@streamer", "ids") == "text"
        pipe = build(args.main, args.draft, props, k is not None)
        return lambda prompt, tokens: run_once(pipe, prompt, k, tokens, k is not None, threshold, text_streamer)

    first = next(iter(variants))
    run = open_variant(first)
    for p in prompts:
        run(p, args.max_new_tokens)
    print(f"warm-up: {first} answered every prompt once, untimed", flush=True)
    del run
    gc.collect()
    for r in range(args.rounds):
        for position, name in enumerate(round_order(list(variants), r)):
            run = open_variant(name)
            run(prompts[0], 16)  # untimed: first-run kernel compilation
            for p in prompts:
                out = run(p, args.max_new_tokens)
                out["round"], out["position"] = r, position
                runs[name].append(out)
                step = out.get("step_ms", {})
                print(f"round {r + 1} {name:>12}: {out['decode_tok_s']:.2f} tok/s decode, "
                      f"{out['chunks']} chunks, wall {out['wall_s']:.2f} s"
                      + (f"; a step {step['wall']:.0f} ms = main {step['main']:.0f} + draft {step['draft']:.0f}"
                         f" + rest {step['rest']:.0f}" if step else ""), flush=True)
            del run
            gc.collect()
    base = [n for n in variants if n.startswith("base")]
    ref = statistics.median(x["decode_tok_s"] for x in runs[base[0]]) if base else None
    # Ratios pair every variant with the main alone, or, with no base variant, with the first.
    paired_ref = base[0] if base else next(iter(variants))
    summary = {}
    for name, rs in runs.items():
        med = statistics.median(x["decode_tok_s"] for x in rs)
        summary[name] = {"median_decode_tok_s": med, "vs_" + (base[0] if base else "none"): med / ref if ref else None}
        if name != paired_ref:  # per (round, prompt) pair: both answered the same prompt in the same round
            ratios = paired_ratios(rs, runs[paired_ref])
            summary[name]["paired_vs_" + paired_ref] = {"median": statistics.median(ratios), "min": min(ratios),
                                                        "max": max(ratios), "n": len(ratios)}
        steps = [x["step_ms"] for x in rs if "step_ms" in x]
        if steps:
            summary[name]["step_ms"] = {part: statistics.median(x[part] for x in steps) for part in steps[0]}
            summary[name]["tokens_per_step"] = statistics.median((args.max_new_tokens - 1) / x["steps"]
                                                                 for x in rs if "steps" in x)
        split = summary[name].get("step_ms")
        paired = summary[name].get("paired_vs_" + paired_ref)
        print(f"{name:>12}: median {med:.2f} tok/s" + (f"  ({med / ref:.2f}x {base[0]})" if ref else "")
              + (f", paired {paired['median']:.3f}x {paired_ref} ({paired['min']:.2f}-{paired['max']:.2f})"
                 if paired else "")
              + (f"; a step {split['wall']:.0f} ms = main {split['main']:.0f} + draft {split['draft']:.0f} + rest "
                 f"{split['rest']:.0f}, {summary[name]['tokens_per_step']:.2f} tokens" if split else ""))
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "k": ks, "variants": {n: p for n, (p, _) in variants.items()}, "summary": summary,
                                         "runs": runs, "max_new_tokens": args.max_new_tokens}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
