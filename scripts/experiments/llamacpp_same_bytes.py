"""Experiment (issue 30, item 4: a same-bytes row): llama.cpp's plain decoding of the preset's
original GGUF main (Q4_K/Q6_K) beside llama.cpp's own Q4_0 requantization of it, which reads
about as many bytes a token as OpenVINO's int4_sym IR, interleaved prompt by prompt and round
by round, rates paired at equal token counts.

    python scripts/experiments/llamacpp_same_bytes.py --gguf MAIN.gguf --tokenizer MAIN_IR_DIR \
        --rounds 2 --json bench-results/llamacpp-same-bytes.json

Needs llama-cpp-python (optional; docs/fairness.md gives its build flags). The Q4_0 file is made
with llama.cpp's own quantizer (`llama_model_quantize`, requantizing) next to --out.
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from demo.core.bench_prompts import select  # noqa: E402
from demo.core.machine import machine_info  # noqa: E402
from demo.core.settings import cpu_cores  # noqa: E402
from demo.engine.llamacpp import LlamaCppRunner, requantize_q4_0  # noqa: E402
from demo.engine.openvino_runner import template  # noqa: E402
from lab.weights_read import gguf_bytes_per_token  # noqa: E402


def rate(times: list, n: int) -> float:
    """Tokens 2..n over the time after the first token (the arena's decode-rate definition)."""
    return (n - 1) / (times[n - 1] - times[0])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", required=True, type=Path)
    ap.add_argument("--tokenizer", required=True, type=Path, help="the main's IR folder (its chat template)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/main-q4_0.gguf"))
    ap.add_argument("--prompts", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    import openvino_genai

    if not args.out.exists():
        requantize_q4_0(args.gguf, args.out, cpu_cores())
    files = {"original": args.gguf, "q4_0": args.out}
    bytes_read = {name: gguf_bytes_per_token(path)["per_token"] for name, path in files.items()}
    for name in files:
        print(f"{name}: reads {bytes_read[name] / 1e9:.2f} GB of weights a token")
    tokenizer = openvino_genai.Tokenizer(str(args.tokenizer))
    prompts = select(["code"], args.prompts)
    threads = cpu_cores()
    runners = {name: LlamaCppRunner(path, threads) for name, path in files.items()}
    samples = []
    for r in range(args.rounds):
        for i, p in enumerate(prompts):
            order = list(files) if (r + i) % 2 == 0 else list(reversed(files))
            times = {name: runners[name].run(template(tokenizer, p.text), args.max_new_tokens) for name in order}
            n = min(len(t) for t in times.values())
            row = {"round": r, "prompt": p.id, "tokens": n, **{name: rate(times[name], n) for name in files}}
            row["ratio"] = row["q4_0"] / row["original"]
            samples.append(row)
            print(f"round {r + 1} {p.id}: original {row['original']:.1f} tok/s, q4_0 {row['q4_0']:.1f} tok/s "
                  f"({n} tokens), q4_0 / original {row['ratio']:.2f}", flush=True)
    ratios = [s["ratio"] for s in samples]
    summary = {name: statistics.median(s[name] for s in samples) for name in files}
    print(f"median decode: original {summary['original']:.2f}, q4_0 {summary['q4_0']:.2f} tok/s; "
          f"q4_0 / original {statistics.median(ratios):.2f}x (paired; {min(ratios):.2f}-{max(ratios):.2f}, {len(ratios)} pairs)")
    if args.json:
        args.json.write_text(json.dumps({"machine": machine_info(), "threads": threads, "bytes_per_token": bytes_read,
                                         "summary": summary, "samples": samples}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
