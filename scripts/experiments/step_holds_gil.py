"""Experiment (issue 31, item 3: a Stop that lands during a prefill): does OpenVINO GenAI's
`ContinuousBatchingPipeline.step()` release Python's GIL while it computes?

Driving generation step by step would let a Stop land between the prefill's chunks (the
scheduler splits a long prompt into `max_num_batched_tokens` pieces), but only if another
Python thread (the web server, the other panel's streamer) can run during a step. This
prefills a long prompt with 1 thread, 256 tokens a step, while a second thread counts as fast
as it can, and prints per step its time and the counts the other thread made meanwhile, beside
the counts it makes in the same time while the main thread only sleeps.

    python scripts/experiments/step_holds_gil.py IR_DIR [--prompt-words 1500]

On openvino-genai 2026.4 (AMD Zen 4, 2026-12-04, the SmolLM2 fixture): every step, 881 ms for
the first 256 prompt tokens and 27 ms for a decoding step alike, let the other thread count
about 60,000 times (its turns at the step's edges), against 9.1 million in 881 ms of sleep:
step() holds the GIL, so a step-driven prefill would freeze the server for a whole chunk
(seconds for the 1.5B main) and is not how the arena stops a prefill.
"""

import argparse
import threading
import time

import openvino_genai as og


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("ir", help="an LLM IR folder")
    ap.add_argument("--prompt-words", type=int, default=1500)
    args = ap.parse_args()
    sc = og.SchedulerConfig()
    sc.cache_size, sc.max_num_batched_tokens, sc.dynamic_split_fuse = 1, 256, True
    pipe = og.ContinuousBatchingPipeline(args.ir, sc, "CPU", {"INFERENCE_NUM_THREADS": 1})
    config = og.GenerationConfig()
    config.max_new_tokens = 4
    handle = pipe.add_request(0, "word " * args.prompt_words, config)  # dropping the handle drops the request
    ticks, stop = [0], threading.Event()

    def count() -> None:
        while not stop.is_set():
            ticks[0] += 1

    counter = threading.Thread(target=count)
    counter.start()
    steps = []
    while pipe.has_non_finished_requests():
        t0, before = time.perf_counter(), ticks[0]
        pipe.step()
        steps.append((time.perf_counter() - t0, ticks[0] - before))
    longest = max(s for s, _ in steps)
    before = ticks[0]
    time.sleep(longest)
    asleep = ticks[0] - before
    stop.set()
    counter.join()
    del handle
    for seconds, n in steps:
        print(f"step {seconds * 1000:6.0f} ms: the other thread counted {n:,}")
    print(f"the main thread asleep for {longest * 1000:.0f} ms: the other thread counted {asleep:,}")


if __name__ == "__main__":
    main()
