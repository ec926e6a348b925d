"""The headline, measured the way a visitor's fair race runs, interleaved: the speculative
side with this machine's calibrated fair defaults, the baseline the page races it against
(the fastest main alone that calibration measured), and llama.cpp's plain decoding of the
same GGUF main model, prompt by prompt, the order rotating, so drift hits every engine alike;
beside them, llama.cpp's own speculative decoding of the same two GGUFs (llama-cpp-python's
draft-model hook given the original draft GGUF; --llamacpp-k sets its K, the calibrated K by default).
The page's baseline main also runs on the other attention backend (paged attention under the
scheduler, or OpenVINO GenAI's stateful SDPA backend, whichever calibration did not choose), so
the speedup is read against the fastest plain OpenVINO configuration measured here, not only the
one calibration picked. --pair MAIN/DRAFT@K and --plain FORMAT@ATTENTION add configurations
calibration did not choose (weights prepared as calibration prepares them) to the same rotation:
every plain configuration counts toward "the fastest plain", every pair is read against it.

    pip install llama-cpp-python            # optional: the outside reference (compiles llama.cpp)
    python -m demo.calibrate                # once: the calibrated defaults
    python scripts/headline.py [--preset NAME] [--prompts 3] [--rounds 3] [--pair int4_channel/int4_sym@2]
                                [--plain int4_channel@SDPA] [--llamacpp-same-bytes] [--json PATH]

The OpenVINO sides are the arena's own fair pipelines (Arena.runners, the very pair a fair
race loads). Rates are decode rates (tokens after the first over the time after the first
token) and, for each pair of engines, are taken at EQUAL token counts: both answers cut at
the shorter of the two, since rates over answers of different lengths do not compare. Each
ratio is paired (same round, same prompt); the summary gives its median and range. Which
weights each side reads, and how many bytes, is printed beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from demo.core import placement  # noqa: E402
from demo.core.bench_prompts import HEADLINE_SET, held_out, named  # noqa: E402
from demo.core.errors import DemoError, run_command  # noqa: E402
from demo.core.machine import machine_info  # noqa: E402
from demo.core.settings import GenerationSettings, cpu_cores  # noqa: E402
from demo.core.streaming import BASELINE, SPECULATIVE  # noqa: E402
from demo.engine import llamacpp  # noqa: E402
from demo.engine.arena import RaceRequest  # noqa: E402
from demo.engine.openvino_runner import template  # noqa: E402
from demo.engine.pipelines import PairKey, build_side  # noqa: E402
from demo.models.presets import PypiSource  # noqa: E402
from lab.headlines import add_common_arguments, calibrated  # noqa: E402
from lab.paired import against_fastest, decode_rate, paired, spread, token_times  # noqa: E402
from lab.weights_read import gguf_bytes_per_token, ir_bytes_per_token, memory_read_gb_s  # noqa: E402

LLAMA = llamacpp.SIDE
OTHER = "baseline_other_backend"  # the page's baseline main on the attention backend it does not use
LLAMA_Q4_0 = f"{LLAMA}_q4_0"  # llama.cpp on its own Q4_0 requantization: about the int4 IR's bytes a token


def llama_speculative(k: int) -> str:
    """The engine name of llama.cpp's own speculative decoding with K guesses."""
    return f"{LLAMA}_speculative_K{k}"


def weights_bytes(folder: Path) -> int:
    """Bytes of weights one decoding step of this IR reads (a lookup-only embedding table left out)."""
    return ir_bytes_per_token(folder)["per_token"]


def extra_configurations(args, store, preset, options):
    """(engine name, (main format, draft format or None, K), PairKey) for each --pair and --plain,
    their weights prepared (converted the first time) as calibration prepares its candidates."""
    from demo.calibrate.calibration import prepare_candidates

    wanted = []
    for text in args.pair:
        formats, _, pair_k = text.partition("@")
        main_format, _, draft_format = formats.partition("/")
        if not (main_format and draft_format and pair_k.isdigit() and int(pair_k) >= 1):
            raise DemoError(f"--pair {text!r}: write MAIN/DRAFT@K, e.g. int4_channel/int4_sym@2.")
        wanted.append((f"speculative_{main_format}_{draft_format}_K{pair_k}", (main_format, draft_format, int(pair_k))))
    for text in args.plain:
        main_format, _, attention = text.partition("@")
        if attention not in ("PA", "SDPA"):
            raise DemoError(f"--plain {text!r}: write FORMAT@PA or FORMAT@SDPA, e.g. int4_channel@SDPA.")
        wanted.append((f"plain_{main_format}_{attention}", (main_format, None, attention)))
    for name, (main_format, draft_format, third) in wanted:
        folders = prepare_candidates(preset, store, [main_format], [draft_format] if draft_format else [])
        main = str(folders[("main", main_format)])
        if draft_format:
            yield name, (main_format, draft_format, third), PairKey(main, str(folders[("draft", draft_format)]), "draft", options)
        else:
            yield name, (main_format, None, None), PairKey(main, None, "draft", options.with_baseline_attention(third))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_arguments(ap)
    ap.add_argument("--no-llamacpp", action="store_true", help="leave the llama.cpp reference out")
    ap.add_argument("--llamacpp-same-bytes", action="store_true",
                    help="also run llama.cpp on its own Q4_0 requantization of the GGUF (about the int4 IR's bytes)")
    ap.add_argument("--llamacpp-k", default="",
                    help="comma-separated K for llama.cpp's speculative rows (default: the calibrated K; 0: none)")
    ap.add_argument("--pair", action="append", default=[], metavar="MAIN/DRAFT@K",
                    help="also race this speculative configuration (weight formats, K), e.g. int4_channel/int4_sym@2")
    ap.add_argument("--plain", action="append", default=[], metavar="FORMAT@ATTENTION",
                    help="also run this main format alone (PA or SDPA) among the plain configurations, e.g. int4_channel@SDPA")
    args = ap.parse_args()

    def body() -> int:
        arena, preset, k = calibrated(args.preset, args.cache_dir, "fair")
        request = RaceRequest(prompt="x", preset=preset.name, mode="fair",
                              settings=GenerationSettings(max_new_tokens=args.max_new_tokens, assistant_tokens=k))
        runners = arena.runners(request, lambda m: print(f"[{m}]", flush=True))
        pair = arena.prepared(request)
        options = arena.options_for(request)
        attention = "SDPA" if placement.baseline_stateful(options, "draft") else "PA"
        other = "PA" if attention == "SDPA" else "SDPA"
        runners[OTHER] = build_side(PairKey(str(pair.baseline_main), None, "draft", options.with_baseline_attention(other)),
                                    BASELINE, lambda m: None, warmup=False)
        labels = {SPECULATIVE: f"speculative: main {pair.main_format} + draft {pair.draft_format}, K={k}",
                  BASELINE: f"baseline: main {pair.baseline_main_format} alone, {attention} attention (the page's fair baseline)",
                  OTHER: f"baseline on the other backend: main {pair.baseline_main_format} alone, {other} attention"}
        reads = {SPECULATIVE: {"main": weights_bytes(pair.main), "draft": weights_bytes(pair.draft)},
                 BASELINE: {"main": weights_bytes(pair.baseline_main)}, OTHER: {"main": weights_bytes(pair.baseline_main)}}
        prompts = held_out(named(HEADLINE_SET[:args.prompts]))
        info = machine_info()
        print(f"CPU: {info.get('cpu_model')}; flags {' '.join(info.get('isa_flags', []))}", flush=True)
        bandwidth = memory_read_gb_s(cpu_cores())  # the physical limit a single-token decode runs against
        print(f"memory read bandwidth, {cpu_cores()} threads: {bandwidth:.1f} GB/s", flush=True)
        engines, plains, ks = [SPECULATIVE, BASELINE, OTHER], [BASELINE, OTHER], {SPECULATIVE: k}
        for name, (main_format, draft_format, pair_k), key in extra_configurations(args, arena.store, preset, options):
            runners[name] = build_side(key, SPECULATIVE if draft_format else BASELINE, lambda m: None, warmup=False)
            reads[name] = {"main": weights_bytes(Path(key.main)), **({"draft": weights_bytes(Path(key.draft))} if draft_format else {})}
            labels[name] = (f"speculative: main {main_format} + draft {draft_format}, K={pair_k}" if draft_format else
                            f"plain: main {main_format} alone, {key.options.baseline_attention} attention")
            engines.append(name)
            if draft_format:
                ks[name] = pair_k
            else:
                plains.append(name)

        def run_openvino(side: str, text: str, tokens: int) -> list[float]:
            runner = runners[side]
            runner = runner.load() if hasattr(runner, "load") else runner  # a pair loaded one side at a time
            settings = GenerationSettings(max_new_tokens=tokens, assistant_tokens=ks.get(side, k))
            result = runner.run(text, settings, lambda c: True)
            if result.error:
                raise DemoError(f"The {side} side failed: {result.error}")
            return token_times(result)

        with tempfile.TemporaryDirectory() as tmp:
            llama, llama_q4_0, templating, llama_specs = None, None, None, {}
            if not args.no_llamacpp:
                if not isinstance(preset.main, PypiSource):
                    raise DemoError(f"Preset {preset.name!r} has no GGUF main model shipped on PyPI for llama.cpp; "
                                    "pass --no-llamacpp.")
                gguf = llamacpp.assemble(preset.main, arena.store.locate_parts(preset.main), Path(tmp) / "main.gguf")
                llama = llamacpp.LlamaCppRunner(gguf, cpu_cores())
                reads[LLAMA] = {"main": gguf_bytes_per_token(gguf)["per_token"]}
                labels[LLAMA] = f"llama.cpp: plain decoding of the original GGUF, {cpu_cores()} threads, flash attention"
                engines.append(LLAMA)
                if args.llamacpp_same_bytes:  # the same kernels reading about the bytes OpenVINO's int4_sym reads
                    q4_0 = llamacpp.requantize_q4_0(gguf, Path(tmp) / "main-q4_0.gguf", cpu_cores())
                    llama_q4_0 = llamacpp.LlamaCppRunner(q4_0, cpu_cores())
                    reads[LLAMA_Q4_0] = {"main": gguf_bytes_per_token(q4_0)["per_token"]}
                    labels[LLAMA_Q4_0] = (f"llama.cpp: plain decoding of its own Q4_0 requantization of the GGUF, "
                                          f"{cpu_cores()} threads, flash attention")
                    engines.append(LLAMA_Q4_0)
                spec_ks = [int(x) for x in args.llamacpp_k.split(",") if x.strip()] if args.llamacpp_k else [k]
                if any(spec_ks) and isinstance(preset.draft, PypiSource):
                    draft_gguf = llamacpp.assemble(preset.draft, arena.store.locate_parts(preset.draft), Path(tmp) / "draft.gguf")
                    for spec_k in filter(None, spec_ks):
                        name = llama_speculative(spec_k)
                        llama_specs[name] = llamacpp.LlamaCppRunner(
                            gguf, cpu_cores(), n_ctx=2048, draft=llamacpp.GgufDraft(draft_gguf, cpu_cores(), spec_k))
                        reads[name] = {"main": reads[LLAMA]["main"], "draft": gguf_bytes_per_token(draft_gguf)["per_token"]}
                        labels[name] = (f"llama.cpp speculative: the original GGUFs, main + draft (llama-cpp-python's "
                                        f"draft-model hook), K={spec_k}, {cpu_cores()} threads, flash attention")
                        engines.append(name)
                import openvino_genai

                tokenizer = openvino_genai.Tokenizer(str(pair.main))
                templating = lambda text: template(tokenizer, text)  # noqa: E731  the arena's own prompt text
            for side, label in labels.items():
                print(f"{label}; reads {sum(reads[side].values()) / 1e9:.2f} GB of weights a token "
                      f"({', '.join(f'{r} {b / 1e9:.2f} GB' for r, b in reads[side].items())})", flush=True)

            steps = {}  # llama.cpp speculative: (draft calls, seconds in them) per sample

            def run(engine: str, text: str, tokens: int) -> list[float]:
                if engine == LLAMA:
                    return llama.run(templating(text), tokens)
                if engine == LLAMA_Q4_0:
                    return llama_q4_0.run(templating(text), tokens)
                if engine in llama_specs:
                    times = llama_specs[engine].run(templating(text), tokens)
                    steps[engine] = (llama_specs[engine].draft.steps, llama_specs[engine].draft.seconds)
                    return times
                return run_openvino(engine, text, tokens)

            for engine in engines:  # warm-up: each engine's first run compiles kernels
                run(engine, prompts[0].text, 8)
            samples = []
            for r in range(args.rounds):
                for i, p in enumerate(prompts):
                    shift = (r + i) % len(engines)
                    times = {e: run(e, p.text, args.max_new_tokens) for e in engines[shift:] + engines[:shift]}
                    samples.append({"round": r, "prompt": p.id, "times": times,
                                    **({"llama_cpp_steps": {e: steps[e][0] for e in llama_specs},
                                        "llama_cpp_draft_s": {e: steps[e][1] for e in llama_specs}} if llama_specs else {})})
                    print(f"round {r + 1} {p.id}: " + ", ".join(
                        f"{e} {decode_rate(t) or 0:.1f} tok/s ({len(t)} tokens)" for e, t in times.items()),
                        flush=True)
        comparisons = {"speculative_vs_baseline": paired(samples, SPECULATIVE, BASELINE),
                       "speculative_vs_baseline_other_backend": paired(samples, SPECULATIVE, OTHER),
                       "baseline_other_backend_vs_baseline": paired(samples, OTHER, BASELINE),
                       # the measure: over the faster plain OpenVINO configuration of each sample
                       "speculative_vs_fastest_plain_openvino": against_fastest(samples, SPECULATIVE, plains)}
        for name in ks:
            if name != SPECULATIVE:
                comparisons[f"{name}_vs_fastest_plain_openvino"] = against_fastest(samples, name, plains)
                comparisons[f"{name}_vs_speculative"] = paired(samples, name, SPECULATIVE)
                if LLAMA in engines:
                    comparisons[f"{name}_vs_llama_cpp"] = paired(samples, name, LLAMA)
        if LLAMA in engines:
            comparisons["speculative_vs_llama_cpp"] = paired(samples, SPECULATIVE, LLAMA)
            comparisons["baseline_vs_llama_cpp"] = paired(samples, BASELINE, LLAMA)
            if LLAMA_Q4_0 in engines:
                comparisons[f"speculative_vs_{LLAMA_Q4_0}"] = paired(samples, SPECULATIVE, LLAMA_Q4_0)
                comparisons[f"{LLAMA_Q4_0}_vs_llama_cpp"] = paired(samples, LLAMA_Q4_0, LLAMA)
            for name in llama_specs:  # the outside engine's own speculation, against its plain decoding and ours
                comparisons[f"{name}_vs_llama_cpp"] = paired(samples, name, LLAMA)
                comparisons[f"speculative_vs_{name}"] = paired(samples, SPECULATIVE, name)
        summary = {name: {"ratio": spread([x["ratio"] for x in rows])} for name, rows in comparisons.items() if rows}
        for e in engines:
            summary[e] = {"decode_tok_s": spread([r for s in samples if (r := decode_rate(s["times"][e]))])}
            if e in llama_specs:  # where a step goes: the draft's calls, the rest (the main's verify, the loop)
                rows = [(s["times"][e], s["llama_cpp_steps"][e], s["llama_cpp_draft_s"][e])
                        for s in samples if s["llama_cpp_steps"][e]]
                summary[e]["tokens_per_step"] = spread([len(times) / n for times, n, _ in rows])
                summary[e]["draft_ms_per_step"] = spread([1000 * drafting / n for _, n, drafting in rows])
                summary[e]["step_ms"] = spread([1000 * (times[-1] - times[0]) / n for times, n, _ in rows])
        for e in engines:
            s = summary[e]["decode_tok_s"]
            # Plain engines read their weights once a token: bytes × rate is the bandwidth they reach.
            if e not in ks and e not in llama_specs:
                summary[e]["gb_s"] = sum(reads[e].values()) * s["median"] / 1e9
            reach = (f"; {summary[e]['gb_s']:.1f} GB/s of weights, {summary[e]['gb_s'] / bandwidth:.0%} of the measured "
                     "bandwidth" if "gb_s" in summary[e] else "")
            if "tokens_per_step" in summary[e]:
                reach += (f"; {summary[e]['tokens_per_step']['median']:.2f} tokens a step of "
                          f"{summary[e]['step_ms']['median']:.0f} ms, the draft {summary[e]['draft_ms_per_step']['median']:.0f} ms of it")
            print(f"{e:>12}: {s['median']:6.2f} tok/s after the first token (median of {s['n']}; "
                  f"{s['min']:.2f}–{s['max']:.2f}){reach}")
        for name in comparisons:
            if name in summary:
                s = summary[name]["ratio"]
                print(f"{name}: {s['median']:.2f}× (paired at equal token counts; range {s['min']:.2f}–{s['max']:.2f}, "
                      f"{s['n']} pairs)")
        if args.json:
            args.json.write_text(json.dumps({
                "machine": info, "preset": preset.name, "k": k, "labels": labels, "weights_bytes_per_token": reads,
                "memory_read_gb_s": bandwidth,
                "prompts": [p.id for p in prompts], "rounds": args.rounds, "max_new_tokens": args.max_new_tokens,
                "summary": summary, "comparisons": comparisons, "samples": samples,
                **({"llama_cpp": llamacpp.build_info()} if LLAMA in engines else {})}, indent=1))
        arena.cache.clear()
        return 0

    return run_command(body)


if __name__ == "__main__":
    sys.exit(main())
