"""The free-drafting headline (issue 56): the own verify loop with its near-free drafters
beside the fastest plain OpenVINO configurations and llama.cpp's plain decoding of the same
GGUF, interleaved prompt by prompt (the order rotating every prompt, so drift hits every
engine alike), on held-out prompts, new code and given code half and half, paired.

    python scripts/free_draft_headline.py [--main-format int4_channel] [--plain int4_channel@SDPA]
        [--plain int4_sym@SDPA] [--pair int4_channel/int4_sym@1] [--rounds 2] [--max-new-tokens 128]
        [--no-datastore] [--no-llamacpp] [--json bench-results/free-draft-headline-<cpu>-<date>.json]

Held out: no prompt here is one calibration measures acceptance on (code-1, code-2), and the
drafters never see an earlier answer to the measured prompt (each answer starts them afresh;
the datastore holds installed Python sources, none of this project's files). Beside every
measured free-drafting rate: the replay's prediction for that prompt (demo/bench/free_draft_replay.py),
from the plain run's own greedy answer and the loop's costs measured in the same run.

Rates are decode rates (tokens after the first over the time after the first token), each pair
of engines compared at equal token counts (both answers cut at the shorter), ratios paired by
round and prompt; "the fastest plain" is, per sample, the fastest of the plain configurations.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from demo.bench.free_draft_replay import loop_seconds_per_step, predict  # noqa: E402
from demo.calibrate.calibration import prepare_candidates  # noqa: E402
from demo.core.bench_prompts import PROMPTS  # noqa: E402
from demo.core.errors import DemoError, run_command  # noqa: E402
from demo.core.machine import machine_info  # noqa: E402
from demo.core.placement import properties_for  # noqa: E402
from demo.core.settings import GenerationSettings, PipelineOptions, cpu_cores  # noqa: E402
from demo.core.streaming import BASELINE, SPECULATIVE  # noqa: E402
from demo.engine import llamacpp  # noqa: E402
from demo.engine.pipelines import PairKey, build_side  # noqa: E402
from demo.engine.verify_loop.runner import OwnLoopRunner, default_proposers  # noqa: E402
from demo.models import code_datastore  # noqa: E402
from demo.models.presets import load_presets  # noqa: E402
from demo.models.sources import ModelStore  # noqa: E402
from lab.paired import against_fastest, decode_rate, paired, spread, token_times  # noqa: E402

FREE = "free_draft"
LLAMA = llamacpp.SIDE
_BY_ID = {p.id: p.text for p in PROMPTS}
_FUNCTION = ("def merge_counts(a, b):\n    result = {}\n    for key in a:\n        result[key] = a[key]\n"
             "    for key in b:\n        if key in result:\n            result[key] = result[key] + b[key]\n"
             "        else:\n            result[key] = b[key]\n    return result\n")
# Held out from calibration (which measures acceptance on code-1 and code-2).
NEW_CODE = {
    "new-sql": _BY_ID["code-4"],
    "new-word-counts": _BY_ID["code-5"],
    "new-fizzbuzz": "Write a Python function fizzbuzz(n) that returns a list of strings for 1..n, with 'Fizz' for "
                    "multiples of 3, 'Buzz' for multiples of 5 and 'FizzBuzz' for both. Add a short docstring.",
    "new-stack": "Implement a Python class Stack with push, pop, peek and is_empty methods backed by a list, "
                 "raising IndexError with a clear message when popping an empty stack.",
}
GIVEN_CODE = {
    "given-type-hints": _BY_ID["summarize-3"],
    "given-rename": _BY_ID["summarize-4"],
    "given-lru": _BY_ID["code-3"],
    "given-comments": "Add a comment above every line of this Python function explaining what it does, and show "
                      f"the full function.\n\n```python\n{_FUNCTION}```",
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="qwen2.5-coder-embedded")
    ap.add_argument("--main-format", action="append", default=[], metavar="FORMAT",
                    help="the main model's weights in the own loop (repeatable: one free-drafting engine each; "
                         "default int4_channel, the fastest plain configuration's weights)")
    ap.add_argument("--plain", action="append", default=[], metavar="FORMAT@ATTENTION",
                    help="a plain OpenVINO GenAI configuration (repeatable; default: the own loop's format on SDPA)")
    ap.add_argument("--pair", action="append", default=[], metavar="MAIN/DRAFT@K",
                    help="also an OpenVINO GenAI speculative pair, e.g. int4_channel/int4_sym@1")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--no-datastore", action="store_true", help="free drafting without the datastore drafter")
    ap.add_argument("--no-llamacpp", action="store_true")
    ap.add_argument("--cache-dir", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    return run_command(lambda: run(args))


def _parse(args):
    args.main_format = args.main_format or ["int4_channel"]
    plains = [(f, a) for f, _, a in (p.partition("@") for p in args.plain or [f"{args.main_format[0]}@SDPA"])]
    for f, a in plains:
        if a not in ("PA", "SDPA"):
            raise DemoError(f"--plain {f}@{a}: write FORMAT@PA or FORMAT@SDPA.")
    pairs = []
    for text in args.pair:
        formats, _, k = text.partition("@")
        main_format, _, draft_format = formats.partition("/")
        if not (main_format and draft_format and k.isdigit()):
            raise DemoError(f"--pair {text!r}: write MAIN/DRAFT@K, e.g. int4_channel/int4_sym@1.")
        pairs.append((main_format, draft_format, int(k)))
    return plains, pairs


def run(args) -> int:
    plains, pairs = _parse(args)
    preset = load_presets(None).get(args.preset)
    store = ModelStore(args.cache_dir)
    mains = {*args.main_format, *(f for f, _ in plains), *(m for m, _, _ in pairs)}
    folders = prepare_candidates(preset, store, sorted(mains), sorted({d for _, d, _ in pairs}))
    info = machine_info()
    print(f"CPU: {info.get('cpu_model')}; flags {' '.join(info.get('isa_flags', []))}", flush=True)
    options = PipelineOptions()
    own_main = folders[("main", args.main_format[0])]
    datastore = None
    if not args.no_datastore:  # one tokenizer for every format of the preset's main model
        print("[the datastore: building or reading it]", flush=True)
        datastore = code_datastore.build(store.cache_dir, own_main, exclude=Path(__file__).resolve().parent.parent)
        print(f"[datastore: {len(datastore.tokens):,} tokens of {datastore.files} files, {datastore.nbytes / 1e6:.0f} MB]")
    runners, labels, ks = {}, {}, {}
    frees = []
    for f in args.main_format:
        name = f"{FREE}_{f}"
        runners[name] = OwnLoopRunner(folders[("main", f)], properties_for("CPU", options), datastore=datastore)
        labels[name] = (f"free drafting: the own verify loop on OpenVINO Runtime, main {f} (stateful IR), drafters: "
                        f"prompt/answer n-grams{', datastore' if datastore else ''}, recycled")
        frees.append(name)
    plain_names = []
    for f, a in plains:
        name = f"plain_{f}_{a}"
        runners[name] = build_side(PairKey(str(folders[("main", f)]), None, "draft", options.with_baseline_attention(a)),
                                   BASELINE, lambda m: None)
        labels[name] = f"plain OpenVINO GenAI: main {f} alone, {a} attention"
        plain_names.append(name)
    for m, d, k in pairs:
        name = f"genai_{m}_{d}_K{k}"
        runners[name] = build_side(PairKey(str(folders[("main", m)]), str(folders[("draft", d)]), "draft", options),
                                   SPECULATIVE, lambda msg: None)
        labels[name], ks[name] = f"OpenVINO GenAI speculative: main {m} + draft {d}, K={k}", k
    engines = [*frees, *plain_names, *ks]
    with tempfile.TemporaryDirectory() as tmp:
        llama = None
        if not args.no_llamacpp:
            gguf = llamacpp.assemble(preset.main, store.locate_parts(preset.main), Path(tmp) / "main.gguf")
            llama = llamacpp.LlamaCppRunner(gguf, cpu_cores())
            labels[LLAMA] = f"llama.cpp: plain decoding of the original GGUF, {cpu_cores()} threads"
            engines.append(LLAMA)
        for name, label in labels.items():
            print(label, flush=True)

        def run_engine(engine: str, text: str, tokens: int):
            if engine == LLAMA:
                return llama.run(runners[frees[0]].template(text), tokens), None
            settings = GenerationSettings(max_new_tokens=tokens, assistant_tokens=ks.get(engine, 7),
                                          method=FREE if engine in frees else "draft")
            result = runners[engine].run(text, settings, lambda c: True)
            if result.error:
                raise DemoError(f"{engine} failed: {result.error}")
            return token_times(result), result

        prompts = [("new", k, v) for k, v in NEW_CODE.items()] + [("given", k, v) for k, v in GIVEN_CODE.items()]
        for engine in engines:
            run_engine(engine, prompts[0][2], 8)
        samples = []
        for r in range(args.rounds):
            for i, (cls, pid, text) in enumerate(prompts):
                shift = (r * len(prompts) + i) % len(engines)
                times, results = {}, {}
                for e in engines[shift:] + engines[:shift]:
                    times[e], results[e] = run_engine(e, text, args.max_new_tokens)
                replay = {e: _replay(runners[e], text, results[plain_names[0]], results[e], datastore) for e in frees}
                samples.append({"round": r, "prompt": pid, "class": cls, "times": times, "replay": replay})
                print(f"round {r + 1} {pid}: " + ", ".join(
                    f"{e} {decode_rate(t) or 0:.1f} tok/s ({len(t)})" for e, t in times.items())
                    + "".join(f"; replay of {e} predicts {x['predicted_ratio']:.2f}× its own plain step "
                              f"({x['share_drafted']:.0%} of tokens from drafting steps, "
                              f"{x['tokens_per_drafting_step']:.2f} a drafting step)" for e, x in replay.items()),
                    flush=True)
    _report(args, info, labels, engines, frees, plain_names, samples)
    return 0


def _replay(own: OwnLoopRunner, text: str, plain_result, free_result, datastore) -> dict:
    """The replay's prediction for this prompt from the plain run's greedy answer, with the own
    loop's costs as they stand and its own overhead a step measured in this sample's run."""
    ids = [int(t) for t in own.tokenizer.encode(own.template(text)).input_ids.data[0]]
    answer = plain_result.token_ids
    steps = own.last_steps[1:]
    loop_s = loop_seconds_per_step(free_result, steps)
    prediction = predict(ids, answer, default_proposers(datastore), own.gate, loop_s, loop_s, min(own.eos_ids))
    return {**prediction.as_dict(), "loop_ms_per_step": 1000 * loop_s, "costs_ms": [1000 * c for c in own.costs],
            "switch_ms": 1000 * own.gate.switch_s, "widths": [s.width for s in steps]}


def _best_plain(sample: dict, plain_names: list) -> dict:
    """The sample with one more engine, "fastest_plain": its fastest plain configuration."""
    best = max(plain_names, key=lambda e: decode_rate(sample["times"][e]) or 0)
    return {**sample, "times": {**sample["times"], "fastest_plain": sample["times"][best]}}


def _report(args, info, labels, engines, frees, plain_names, samples) -> None:
    comparisons = {}
    for cls in ("new", "given", None):
        chosen = [s for s in samples if cls is None or s["class"] == cls]
        tag = cls or "mix"
        for free in frees:
            comparisons[f"{free}_vs_fastest_plain_{tag}"] = against_fastest(chosen, free, plain_names)
            if LLAMA in engines:
                comparisons[f"{free}_vs_llama_cpp_{tag}"] = paired(chosen, free, LLAMA)
            comparisons[f"{free}_replay_predicted_{tag}"] = [{"ratio": s["replay"][free]["predicted_ratio"]} for s in chosen]
        if LLAMA in engines:
            comparisons[f"fastest_plain_vs_llama_cpp_{tag}"] = paired(
                [_best_plain(s, plain_names) for s in chosen], "fastest_plain", LLAMA)
    summary = {name: spread([x["ratio"] for x in rows]) for name, rows in comparisons.items() if rows}
    summary["rates"] = {e: spread([r for s in samples if (r := decode_rate(s["times"][e]))]) for e in engines}
    for e, s in summary["rates"].items():
        print(f"{e:>28}: {s['median']:6.2f} tok/s after the first token (median of {s['n']}; {s['min']:.2f}–{s['max']:.2f})")
    for name, s in summary.items():
        if name != "rates":
            print(f"{name}: {s['median']:.2f}× (range {s['min']:.2f}–{s['max']:.2f}, {s['n']} pairs)")
    for free in frees:
        per_prompt = [f"{s['prompt']} r{s['round'] + 1}: measured {x['ratio']:.2f}×, replay {s['replay'][free]['predicted_ratio']:.2f}×"
                      for s, x in zip(samples, comparisons[f"{free}_vs_fastest_plain_mix"])]
        print(f"per prompt, {free} ÷ the fastest plain: " + "; ".join(per_prompt))
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "labels": labels, "engines": engines, "rounds": args.rounds,
                                         "max_new_tokens": args.max_new_tokens, "prompts": {**NEW_CODE, **GIVEN_CODE},
                                         "summary": summary, "comparisons": comparisons, "samples": samples}, indent=1))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    sys.exit(main())
