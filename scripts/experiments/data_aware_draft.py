"""Experiment (issue 30, item 3: a draft that guesses better at the same cost a guess): the
int4_sym draft compressed by NNCF with a dataset (AWQ and/or scale estimation) instead of
data-free.

The int4_sym draft (groups of 128) guesses worse than the gguf draft it is made from (Q4_0,
groups of 32): 4.23 against 4.54 tokens a step at K=4 on the Zen 5 (BENCHMARKS.md), while a
guess costs 1.3x less. Data-aware compression keeps int4_sym's layout, so its bytes and its
cost a guess, and fits the scales to real activations: if it wins back acceptance, every step
yields more tokens for nothing.

The data are not the benchmark's prompts (those measure the result): chunks of the Python
standard library's own source, which ships with every Python, so this runs offline.

    python scripts/experiments/data_aware_draft.py GGUF_DRAFT_IR OUT [--awq] [--scale-estimation]
        [--samples 32] [--tokens 256]

Then compare OUT with the calibrated int4_sym draft in the real pipeline, interleaved:
`spec_knobs.py MAIN DRAFT --variant spec='{…}' --variant spec-awq='{…,"@draft":"OUT"}' …`.
"""

from __future__ import annotations

import argparse
import json
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# Modules of the standard library, read in this order until enough tokens are collected: plain
# Python of several styles (no generated tables), none of them among the benchmark's tasks.
SOURCES = ("textwrap.py", "fractions.py", "statistics.py", "heapq.py", "bisect.py", "shlex.py",
           "difflib.py", "csv.py", "dataclasses.py", "functools.py", "json/encoder.py",
           "json/decoder.py", "string.py", "calendar.py", "ipaddress.py", "argparse.py")


def code_samples(tokenizer, count: int, tokens: int) -> list[np.ndarray]:
    """`count` runs of `tokens` token ids cut from the standard library's sources."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    samples: list[np.ndarray] = []
    for name in SOURCES:
        ids = np.asarray(tokenizer.encode((stdlib / name).read_text()).input_ids.data)[0]
        for start in range(0, len(ids) - tokens + 1, tokens):
            samples.append(ids[start:start + tokens].astype(np.int64))
            if len(samples) == count:
                return samples
    raise SystemExit(f"the sources gave only {len(samples)} samples of {tokens} tokens; ask for fewer")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src", type=Path, help="the draft's GGUF-reader IR folder (the gguf format)")
    ap.add_argument("out", type=Path)
    ap.add_argument("--awq", action="store_true")
    ap.add_argument("--scale-estimation", action="store_true")
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=256)
    args = ap.parse_args()

    import nncf
    import openvino as ov
    import openvino_genai as ov_genai

    from demo.models.formats import (DYNAMIC_QUANTIZATION, _nncf_options, _quiet_nncf, _save,
                                     fuse_projections, link_companions)
    from demo.models.gguf_unpack import fold_packed_weights
    from demo.engine.stateful import step_inputs

    started = time.perf_counter()
    samples = code_samples(ov_genai.Tokenizer(str(args.src)), args.samples, args.tokens)
    model = ov.Core().read_model(args.src / "openvino_model.xml")
    fold_packed_weights(model)
    options = _nncf_options("int4_sym")
    options.update(dataset=nncf.Dataset([step_inputs(s[None, :], 0) for s in samples]), awq=args.awq,
                   scale_estimation=args.scale_estimation, subset_size=len(samples))
    with _quiet_nncf():
        model = nncf.compress_weights(model, **options)
    fuse_projections(model, None)
    model.set_rt_info(str(options["group_size"]), ["runtime_options", DYNAMIC_QUANTIZATION])
    args.out.mkdir(parents=True, exist_ok=True)
    _save(model, args.out)
    link_companions(args.src, args.out)
    seconds = time.perf_counter() - started
    print(json.dumps({"out": str(args.out), "awq": args.awq, "scale_estimation": args.scale_estimation,
                      "samples": len(samples), "tokens": args.tokens, "seconds": round(seconds, 1)}))


if __name__ == "__main__":
    main()
