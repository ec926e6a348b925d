"""Experiment (issue 30, item 2): how closely a main IR's greedy choices follow the original
weights', the quality bar calibration holds every main format to (demo.calibrate.measure:
agreement over reads along the same answers, MIN_AGREEMENT). The reference (the GGUF reader's
IR of the original GGUF) answers the benchmark's code prompts greedily; every folder then reads
those answers as written (teacher forcing) and its choice at each position is compared with
the reference's.

    python scripts/experiments/format_agreement.py GGUF_MAIN_IR int4_sym=APP_INT4_SYM \
        per-channel=OUT_ROOT/per-channel [--prompts 5] [--max-new-tokens 128] [--json OUT]
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from demo.calibrate.measure import MIN_AGREEMENT, agreement, greedy_answer, prompt_ids, reads_along  # noqa: E402
from demo.core.bench_prompts import select  # noqa: E402
from demo.core.machine import machine_info  # noqa: E402
from demo.engine.stateful import StatefulModel  # noqa: E402


def answer_without_eos(model: StatefulModel, ids: list[int], eos: int, max_new_tokens: int) -> list[int]:
    """The reference's greedy answer (calibration's own, measure.greedy_answer), its end token left out."""
    answer, _ = greedy_answer(model, ids, max_new_tokens, eos)
    return answer[:-1] if answer and answer[-1] == eos else answer


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("reference", type=Path, help="the GGUF reader's IR of the original main")
    ap.add_argument("variants", nargs="+", metavar="NAME=FOLDER")
    ap.add_argument("--prompts", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    prompts = select(["code"], args.prompts)
    ids, eos = prompt_ids(args.reference, [p.text for p in prompts])
    reference = StatefulModel(args.reference, None)
    answers = [answer_without_eos(reference, i, eos, args.max_new_tokens) for i in ids]
    reference_reads = reads_along(reference, ids, answers)
    reference.close()
    result = {}
    for spec in args.variants:
        name, _, folder = spec.partition("=")
        model = StatefulModel(Path(folder), None)
        reads = reads_along(model, ids, answers)
        model.close()
        per_prompt = [agreement([r], [q]) for r, q in zip(reads, reference_reads)]
        result[name] = {"folder": folder, "agreement": agreement(reads, reference_reads), "per_prompt": per_prompt}
        verdict = "a candidate" if result[name]["agreement"] >= MIN_AGREEMENT else "below calibration's bar"
        print(f"{name:>12}: agrees with the original weights on {result[name]['agreement']:.1%} of "
              f"{sum(map(len, reads))} positions ({', '.join(f'{a:.0%}' for a in per_prompt)}): {verdict} "
              f"({MIN_AGREEMENT:.0%})", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"machine": machine_info(), "reference": str(args.reference),
                                         "prompts": [p.id for p in prompts], "max_new_tokens": args.max_new_tokens,
                                         "min_agreement": MIN_AGREEMENT, "variants": result}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
