"""Experiment (issue 30, item 2): the main's int4 weight layout, one NNCF argument at a time:
group size (32, 64, per channel) and whether the embeddings and output layer stay int4 or fall
back to NNCF's backup mode (int8), each made from the GGUF reader's IR exactly as the app makes
int4_sym (demo.models.formats.unpack_and_compress, projections merged), the one argument changed.
Compare them with bare_costs.py (bare, interleaved) and spec_knobs.py (pipelines).

    python scripts/experiments/weight_variants.py GGUF_MAIN_IR OUT_ROOT \
        --variant g64='{"group_size": 64}' --variant g32='{"group_size": 32}' \
        --variant per-channel='{"group_size": -1}' --variant int8-head='{"all_layers": false}'
    python scripts/experiments/bare_costs.py int4_sym=APP_INT4_SYM g64=OUT_ROOT/g64 ... --ms 1,3

Each OUT_ROOT/NAME is a drop-in main folder (tokenizer IRs and JSON files linked).
"""

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from demo.models.formats import unpack_and_compress  # noqa: E402
from lab.weights_read import ir_bytes_per_token  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path, help="the GGUF reader's IR folder of the main model")
    ap.add_argument("out", type=Path)
    ap.add_argument("--variant", action="append", required=True, metavar="NAME=JSON",
                    help="nncf.compress_weights arguments replacing int4_sym's")
    args = ap.parse_args()
    for spec in args.variant:
        name, _, overrides = spec.partition("=")
        dst = args.out / name
        start = time.perf_counter()
        unpack_and_compress(args.src, dst, "int4_sym", nncf_overrides=json.loads(overrides))
        print(f"{name}: {json.loads(overrides)} -> {dst} in {time.perf_counter() - start:.0f} s, "
              f"reads {ir_bytes_per_token(dst)['per_token'] / 1e9:.3f} GB a token", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
