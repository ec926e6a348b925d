"""Experiment (BENCHMARKS.md): plain tok/s of one IR folder under several OpenVINO CPU
property sets, best of 2 greedy runs after a warm-up. Used for the NNCF int4 and CPU
property rows; single runs on a noisy machine, so read differences under ~15 % as noise.

    python scripts/experiments/pipeline_speed.py IR_DIR [IR_DIR ...] \
        --props '{}' '{"DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}' '{"KV_CACHE_PRECISION": "f16"}'
"""

import argparse
import json

import openvino_genai as ov

PROMPT = ("<|im_start|>user\nWrite a Python function that checks whether a string is a palindrome."
          "<|im_end|>\n<|im_start|>assistant\n")


def tokens_per_s(folder: str, props: dict, max_new_tokens: int = 64) -> float:
    pipe = ov.LLMPipeline(folder, "CPU", **props)
    pipe.generate(PROMPT, max_new_tokens=8)  # warm-up
    config = ov.GenerationConfig()
    config.max_new_tokens = max_new_tokens
    config.apply_chat_template = False  # PROMPT is already templated (ChatML)
    best = 0.0
    for _ in range(2):
        pm = pipe.generate([PROMPT], config).perf_metrics
        best = max(best, pm.get_num_generated_tokens() / (pm.get_generate_duration().mean / 1000))
    return best


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folders", nargs="+")
    ap.add_argument("--props", nargs="*", default=["{}"], help="JSON property sets to try")
    args = ap.parse_args()
    for folder in args.folders:
        for props in args.props:
            print(f"{folder}  {props}  {tokens_per_s(folder, json.loads(props)):.1f} tok/s", flush=True)
