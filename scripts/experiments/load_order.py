"""Experiment (BENCHMARKS.md, issue 30): does the order in which two pipelines are loaded into one
process move the ratio read between them? Calibration's plain rotation read the same main, loaded
twice, 1.03x faster the second time, and paged attention against the stateful backend 1.07x or
0.96x depending on which was loaded first.

    python scripts/experiments/load_order.py MAIN_IR DRAFT_IR --k 4 [--phases 4] [--rounds 3] [--json OUT]
    python scripts/experiments/load_order.py MAIN_IR DRAFT_IR --plain [--rounds 6] [--json OUT]
    python scripts/experiments/load_order.py MAIN_IR DRAFT_IR --reloads 8 [--rounds 3] [--json OUT]

Each phase loads the main alone (paged attention, the arena's fair properties) and the speculative
pipeline in one order, warms both, then times them in turn, prompt by prompt, the order within a
prompt alternating, and frees both. Phases alternate the load order (baseline first, speculative
first, speculative first, baseline first: ABBA). Printed: the speculative side's decode rate over
the baseline's, paired by prompt, per load order.

`--plain` runs calibration's own plain rotation (demo.calibrate.plain.plain_rates: every
configuration loaded and warmed, then timed in turn, the order rotating, one prompt of 48 tokens
a round) three times: the same main loaded twice on paged attention (an A/A test), paged
attention loaded before the stateful backend, and after it. Printed: the later-loaded
configuration's rate over the earlier one's, per round.

`--reloads N` keeps one main-alone pipeline loaded as a reference and loads the same
configuration N more times, one at a time: each copy and the reference answer the same prompts in
turn (`--rounds` passes, the order alternating), then the copy is freed. Printed: each copy's rate
over the reference's, paired by prompt, and how much the copies differ from each other (from
load to load) against how much one copy's pairs differ (within a load).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from demo.calibrate.measure import decode_tok_s  # noqa: E402
from demo.core.bench_prompts import select  # noqa: E402
from demo.core.machine import machine_info  # noqa: E402
from demo.core.settings import GenerationSettings, PipelineOptions  # noqa: E402
from demo.core.streaming import BASELINE, SPECULATIVE  # noqa: E402

ORDERS = {"baseline-first": (BASELINE, SPECULATIVE), "speculative-first": (SPECULATIVE, BASELINE)}


def phase_orders(phases: int) -> list[str]:
    """ABBA over the two load orders, so a drift across the phases hits both alike."""
    abba = ["baseline-first", "speculative-first", "speculative-first", "baseline-first"]
    return [abba[i % 4] for i in range(phases)]


def plain_load_order(main_ir: Path, rounds: int) -> dict:
    from demo.calibrate.plain import plain_rates

    texts = [p.text for p in select(["code"], 1)]
    out = {}
    for name, folders, attentions in [("same-main-twice", {"first": main_ir, "second": main_ir}, ("PA",)),
                                      ("paged-then-stateful", {"int4": main_ir}, ("PA", "SDPA")),
                                      ("stateful-then-paged", {"int4": main_ir}, ("SDPA", "PA"))]:
        rates = plain_rates(folders, texts, 48, None, rounds, attentions=attentions)["rates"]
        first, second = list(rates)  # in load order
        ratios = [b / a for a, b in zip(rates[first], rates[second])]
        out[name] = {"loaded_first": first, "loaded_second": second, "rates": rates,
                     "second_over_first": ratios}
        print(f"{name}: {second} / {first} {statistics.median(ratios):.3f}x "
              f"({', '.join(f'{x:.2f}' for x in ratios)})", flush=True)
    return out


def reloads(main_ir: Path, copies: int, rounds: int, prompts: list, settings) -> list:
    from demo.engine.pipelines import PairKey, build_side

    key = PairKey(str(main_ir), None, "draft", PipelineOptions(cpu_precision="f32"))
    reference = build_side(key, BASELINE, lambda m: None)
    out = []
    for c in range(copies):
        copy = build_side(key, BASELINE, lambda m: None)
        ratios = []
        for r in range(rounds):
            for i, text in enumerate(prompts):
                pair = [("copy", copy), ("reference", reference)][:: 1 if (r + i) % 2 == 0 else -1]
                rate = {name: decode_tok_s(runner.run(text, settings, lambda ch: True).chunks) for name, runner in pair}
                ratios.append(rate["copy"] / rate["reference"])
        del copy
        gc.collect()
        out.append(ratios)
        print(f"copy {c + 1}: {statistics.median(ratios):.3f}x the reference "
              f"({', '.join(f'{x:.2f}' for x in ratios)})", flush=True)
    medians = [statistics.median(r) for r in out]
    within = statistics.median(statistics.pstdev(r) for r in out)
    print(f"from load to load: medians {min(medians):.3f}-{max(medians):.3f} (sd {statistics.pstdev(medians):.3f}); "
          f"within one load: sd {within:.3f} (median over the copies)", flush=True)
    return out


def main() -> int:
    from demo.engine.pipelines import PairKey, build_side

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("main", type=Path)
    ap.add_argument("draft", type=Path)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--phases", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3, help="passes over the prompts in each phase")
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--plain", action="store_true", help="calibration's plain rotation instead (see above)")
    ap.add_argument("--reloads", type=int, default=0, help="copies of the main alone to load in turn (see above)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    info = machine_info()
    print(f"CPU: {info.get('cpu_model')}; flags {' '.join(info.get('isa_flags', []))}", flush=True)
    if args.plain:
        result = plain_load_order(args.main, args.rounds)
        if args.json:
            args.json.write_text(json.dumps({"machine": info, "plain": result}, indent=1))
        return 0
    prompts = [p.text for p in select(["code"], args.prompts)]
    if args.reloads:
        result = reloads(args.main, args.reloads, args.rounds, prompts, GenerationSettings(max_new_tokens=args.max_new_tokens))
        if args.json:
            args.json.write_text(json.dumps({"machine": info, "max_new_tokens": args.max_new_tokens,
                                             "copy_over_reference": result}, indent=1))
        return 0
    options = PipelineOptions(cpu_precision="f32")
    keys = {BASELINE: PairKey(str(args.main), None, "draft", options),
            SPECULATIVE: PairKey(str(args.main), str(args.draft), "draft", options)}
    settings = GenerationSettings(max_new_tokens=args.max_new_tokens, assistant_tokens=args.k)
    phases = []
    for order_name in phase_orders(args.phases):
        runners = {side: build_side(keys[side], side, lambda m: None) for side in ORDERS[order_name]}
        ratios = []
        for r in range(args.rounds):
            for i, text in enumerate(prompts):
                sides = ORDERS[order_name] if (r + i) % 2 == 0 else ORDERS[order_name][::-1]
                rate = {side: decode_tok_s(runners[side].run(text, settings, lambda c: True).chunks) for side in sides}
                ratios.append(rate[SPECULATIVE] / rate[BASELINE])
        runners.clear()
        gc.collect()
        phases.append({"order": order_name, "speculative_over_baseline": ratios})
        print(f"{order_name}: speculative / baseline {statistics.median(ratios):.3f}x "
              f"({min(ratios):.2f}-{max(ratios):.2f}, {len(ratios)} pairs)", flush=True)
    summary = {}
    for name in ORDERS:
        ratios = [x for p in phases if p["order"] == name for x in p["speculative_over_baseline"]]
        if ratios:
            summary[name] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios), "n": len(ratios)}
            print(f"all phases, {name}: {summary[name]['median']:.3f}x ({summary[name]['min']:.2f}-"
                  f"{summary[name]['max']:.2f}, {len(ratios)} pairs)")
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "k": args.k, "max_new_tokens": args.max_new_tokens,
                                         "phases": phases, "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
