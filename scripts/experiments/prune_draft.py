"""Experiment (BENCHMARKS.md): a layer-pruned draft, made by dropping transformer blocks
from a GGUF, as OpenVINO's Qwen3-pruned-6L draft does (that one is also distilled; this
is not). Keeps blocks [0, keep) and the last `tail` blocks, renumbered.

    python scripts/experiments/prune_draft.py DRAFT.gguf OUT.gguf --keep 10 --tail 2
    python -c "import openvino_genai as g; g.LLMPipeline('OUT.gguf', 'CPU', enable_save_ov_model=True)"
    python -m demo.cli MAIN_IR_DIR OUT_DIR --mode fair "prompt"
"""

import argparse
import re

import gguf


def prune(src: str, dst: str, keep: int, tail: int) -> int:
    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    total = int(reader.fields[f"{arch}.block_count"].contents())
    kept = list(range(keep)) + list(range(total - tail, total))
    new_index = {old: new for new, old in enumerate(kept)}
    writer = gguf.GGUFWriter(dst, arch=arch)
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        if field.name == f"{arch}.block_count":
            writer.add_block_count(len(kept))
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
    for t in reader.tensors:
        m = re.match(r"blk\.(\d+)\.(.*)", t.name)
        if m and int(m.group(1)) not in new_index:
            continue
        name = f"blk.{new_index[int(m.group(1))]}.{m.group(2)}" if m else t.name
        writer.add_tensor(name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return len(kept)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--keep", type=int, default=10, help="first blocks to keep")
    ap.add_argument("--tail", type=int, default=2, help="last blocks to keep")
    args = ap.parse_args()
    print(f"kept {prune(args.src, args.dst, args.keep, args.tail)} blocks")
