"""Experiment (issue 30, items 2 and 3): merge the projections of an existing int4 IR folder
that read the same input (demo/models/fused_projections.py, which the int4 formats now apply
when they are made) into a new folder, to compare the two side by side or to bring a folder
prepared before the merge up to date. With --from-gguf the source is the GGUF reader's folder,
compressed to int4_sym as the format is made; --sizes then picks which groups are merged (3:
q/k/v, 2: gate/up, none: no merge at all).

    python scripts/experiments/fuse_projections.py IR_DIR OUT_DIR
    python scripts/experiments/fuse_projections.py GGUF_DIR OUT_DIR --from-gguf --sizes 3
    python scripts/experiments/spec_knobs.py --main IR_DIR --draft DRAFT --k 5 \
        --variant base='{}' --variant base-fused='{"@main": "OUT_DIR"}' ...

The tokenizer/detokenizer IRs and the folder's JSON files are linked or copied, so OUT_DIR is a
drop-in main or draft.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from demo.models.formats import link_companions, unpack_and_compress  # noqa: E402
from demo.models.fused_projections import fuse_projections  # noqa: E402


def main() -> int:
    import openvino as ov

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--from-gguf", action="store_true", help="src is the GGUF reader's IR: compress it to int4_sym")
    ap.add_argument("--sizes", default=None, help="merge only groups of these sizes (3,2), or none")
    args = ap.parse_args()
    sizes = None if args.sizes is None else tuple(int(n) for n in args.sizes.split(",") if n.strip() and n != "none")
    count = lambda model: sum(op.get_type_name() == "MatMul" for op in model.get_ordered_ops())  # noqa: E731
    before = count(ov.Core().read_model(str(args.src / "openvino_model.xml")))
    if args.from_gguf:
        unpack_and_compress(args.src, args.out, "int4_sym", merge_sizes=sizes)
        groups = None
    else:
        model = ov.Core().read_model(str(args.src / "openvino_model.xml"))
        groups = fuse_projections(model, sizes)
        args.out.mkdir(parents=True, exist_ok=True)
        ov.save_model(model, str(args.out / "openvino_model.xml"), compress_to_fp16=False)
        link_companions(args.src, args.out)
    print(json.dumps({"made_from": str(args.src), "groups_merged": groups, "matmuls_before": before,
                      "matmuls_after": count(ov.Core().read_model(str(args.out / "openvino_model.xml")))}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
