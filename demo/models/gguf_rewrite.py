"""Rewrite GGUF tensors that OpenVINO GenAI's GGUF reader cannot load.

The reader (a preview in openvino-genai 2026.4) understands Q4_0, Q4_1, Q8_0, Q4_K, Q6_K,
F16, BF16 and F32. Qwen2.5-Coder-0.5B as shipped on PyPI has 133 Q5_0 tensors, so we
dequantize those (and, for draft speed, the other quantized tensors that are not already
K-quants) and quantize them again as Q4_0 with the `gguf` package. No torch needed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

import gguf
from gguf import GGMLQuantizationType as Q

# Already fast and readable: keep as is. F32/F16/BF16 tensors (norms, biases) stay too.
_KEEP = {Q.Q4_K, Q.Q6_K, Q.Q4_0, Q.F32, Q.F16, Q.BF16}
TARGET = Q.Q4_0


def needs_rewrite(path: Path) -> bool:
    reader = gguf.GGUFReader(str(path))
    return any(t.tensor_type not in _KEEP for t in reader.tensors)


def rewrite_as_q4_0(src: Path, dst: Path, progress: Optional[Callable[[int, int], None]] = None) -> int:
    """Copy `src` to `dst`, re-quantizing every tensor whose type is not kept as Q4_0.

    Returns the number of tensors rewritten. Metadata (tokenizer, chat template, hyper-
    parameters) is copied unchanged.
    """
    reader = gguf.GGUFReader(str(src))
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(str(dst), arch=arch)
    for field in reader.fields.values():
        # GGUF.* are the header counters the writer computes itself; the architecture
        # was given to the constructor.
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)

    rewritten = 0
    total = len(reader.tensors)
    for n, t in enumerate(reader.tensors, 1):
        if t.tensor_type in _KEEP:
            writer.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
        else:
            values = gguf.quants.dequantize(t.data, t.tensor_type)
            packed = gguf.quants.quantize(values, TARGET)
            writer.add_tensor(t.name, packed, raw_shape=packed.shape, raw_dtype=TARGET)
            rewritten += 1
        if progress:
            progress(n, total)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return rewritten
