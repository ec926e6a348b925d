"""Rewrite GGUF tensors that OpenVINO GenAI's GGUF reader cannot load.

The reader (a preview in openvino-genai 2026.4) understands Q4_0, Q4_1, Q8_0, Q4_K, Q6_K,
F16, BF16 and F32. Qwen2.5-Coder-0.5B as shipped on PyPI has 133 Q5_0 tensors, so we
dequantize those (and, for draft speed, the other quantized tensors that are not already
K-quants) and quantize them again as Q4_0 with the `gguf` package. No torch needed.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Callable, Optional

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

from .gguf_header import padded, read_header

# Already fast and readable: keep as is. F32/F16/BF16 tensors (norms, biases) stay too.
_KEEP = {Q.Q4_K, Q.Q6_K, Q.Q4_0, Q.F32, Q.F16, Q.BF16}
TARGET = Q.Q4_0


def needs_rewrite(path: Path) -> bool:
    return any(Q(t.type) not in _KEEP for t in read_header(path).tensors)


def rewrite_as_q4_0(src: Path, dst: Path, progress: Optional[Callable[[int, int], None]] = None) -> int:
    """Copy `src` to `dst`, re-quantizing every tensor whose type is not kept as Q4_0.

    Returns the number of tensors rewritten. The metadata (tokenizer, chat template, hyper-
    parameters) is copied byte for byte: parsing it with gguf-py takes 13 s of Python for
    Qwen2.5's tokenizer (demo.models.gguf_header), on a first launch's critical path. The
    tensor infos and data follow as gguf-py's GGUFWriter lays them out (each aligned).
    """
    header = read_header(src)
    new_types = [t.type if Q(t.type) in _KEEP else TARGET for t in header.tensors]
    source = np.memmap(src, dtype=np.uint8, mode="r")
    rewritten, total = 0, len(header.tensors)
    with open(dst, "wb") as out:
        out.write(source[:header.kv_span[1]].tobytes())  # magic, version, counts, metadata
        offset = 0
        for t, new in zip(header.tensors, new_types):
            name = t.name.encode()
            out.write(struct.pack("<Q", len(name)) + name + struct.pack("<I", len(t.dims)))
            out.write(b"".join(struct.pack("<Q", d) for d in t.dims) + struct.pack("<IQ", new, offset))
            offset += padded(_nbytes(t.dims, new), header.alignment)
        out.write(bytes(padded(out.tell(), header.alignment) - out.tell()))
        for n, (t, new) in enumerate(zip(header.tensors, new_types), 1):
            start = header.data_start + t.offset
            raw = source[start:start + _nbytes(t.dims, t.type)]
            if new == t.type:
                out.write(raw.tobytes())
            else:
                values = gguf.quants.dequantize(raw.reshape(-1, _nbytes(t.dims[:1], t.type)), Q(t.type))
                out.write(gguf.quants.quantize(values, TARGET).tobytes())
                rewritten += 1
            out.write(bytes(padded(out.tell(), header.alignment) - out.tell()))
            if progress:
                progress(n, total)
    return rewritten


def _nbytes(dims: tuple, qtype: int) -> int:
    block, size = gguf.GGML_QUANT_SIZES[Q(qtype)]
    return int(np.prod(dims, dtype=np.int64)) // block * size
