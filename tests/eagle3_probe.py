"""One EAGLE-3 race through the engine, run as a child process by tests/test_eagle3.py:

    OPENVINO_LOG_LEVEL=3 python -m tests.eagle3_probe MAIN_DIR HEAD_DIR [K [BRANCHING DEPTH]]

A child, because a freshly built EAGLE-3 pipeline on CPU may crash at its first generate
(openvino.genai issue 4425), and because OpenVINO GenAI's own log lines (which say whether it
took the EAGLE-3 path) go to this process's output. Prints one JSON line last.
"""

import json
import sys
from pathlib import Path

from demo.core.settings import GenerationSettings, PipelineOptions
from demo.core.streaming import BASELINE, SPECULATIVE, ChunkEvent, DoneEvent
from demo.engine.pipelines import PipelineCache
from demo.engine.race import race

PROMPT = "Write a Python function that reverses a string."


def main(argv: list[str]) -> None:
    main_dir, head_dir = Path(argv[0]), Path(argv[1])
    k = int(argv[2]) if len(argv) > 2 else 3
    tree = dict(branching_factor=int(argv[3]), tree_depth=int(argv[4])) if len(argv) > 4 else {}
    settings = GenerationSettings(max_new_tokens=24, method="eagle3", assistant_tokens=k, **tree).validated()
    runners = PipelineCache().get(main_dir, head_dir, "eagle3", PipelineOptions(threads=1))
    chunks = {BASELINE: [], SPECULATIVE: []}
    results = {}
    for event in race(runners, PROMPT, settings):
        if isinstance(event, ChunkEvent):
            chunks[event.side].append(len(event.chunk.token_ids))
        elif isinstance(event, DoneEvent):
            results[event.side] = event.result
    spec, base = results[SPECULATIVE], results[BASELINE]
    print(json.dumps({
        "error": spec.error or base.error,
        "chunk_tokens": chunks[SPECULATIVE],
        "baseline_chunks": len(chunks[BASELINE]),
        "accepted": spec.ov_accepted_tokens, "drafted": spec.ov_draft_tokens,
        "generated": spec.ov_generated_tokens, "steps": spec.ov_step_tokens,
        "text": "".join(c.text for c in spec.chunks), "baseline_text": "".join(c.text for c in base.chunks),
    }))


if __name__ == "__main__":
    main(sys.argv[1:])
