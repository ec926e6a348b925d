"""A GGUF file's header read fast: its scalar and string metadata, where its metadata bytes
lie, and its tensors (name, dims, type, where the data is).

gguf-py's GGUFReader builds three numpy views for every element of every array, so it takes
13 s of pure Python (holding the GIL) for Qwen2.5's tokenizer arrays (151,936 tokens and as
many merges), three times in a first launch: the draft's rewrite, and each model's context
length. Here an array is skipped by reading only its strings' lengths (a fraction of a second).
Layout as in the GGUF spec (ggml/docs/gguf.md): little-endian, version 2 or 3.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9
DEFAULT_ALIGNMENT = 32


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dims: tuple            # ne[0] (the row length) first, as stored
    type: int              # a GGMLQuantizationType value
    offset: int            # of its data, from the start of the data section


@dataclass
class Header:
    version: int
    kv_count: int
    kv_span: tuple         # (start, end) byte offsets of the metadata key-value pairs
    fields: dict = field(default_factory=dict)   # scalars and strings; arrays are skipped
    tensors: list = field(default_factory=list)
    data_start: int = 0
    alignment: int = DEFAULT_ALIGNMENT


class _Cursor:
    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def take(self, fmt: str):
        value = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.take("<Q")
        self.pos += n
        return bytes(self.buf[self.pos - n:self.pos]).decode("utf-8", errors="replace")

    def skip_strings(self, count: int) -> None:
        buf, pos, unpack = self.buf, self.pos, struct.unpack_from
        for _ in range(count):
            pos += 8 + unpack("<Q", buf, pos)[0]
        self.pos = pos

    def value(self, vtype: int) -> Optional[Any]:
        if vtype in _SCALAR:
            return self.take(_SCALAR[vtype])
        if vtype == STRING:
            return self.string()
        if vtype != ARRAY:
            raise ValueError(f"unknown GGUF value type {vtype}")
        etype, count = self.take("<I"), self.take("<Q")
        if etype == STRING:
            self.skip_strings(count)
        elif etype in _SCALAR:
            self.pos += count * struct.calcsize(_SCALAR[etype])
        else:  # arrays of arrays: element by element
            for _ in range(count):
                self.value(etype)
        return None


def read_header(path: Path, stop_at: Optional[str] = None) -> Header:
    """The header of the GGUF at `path`; with `stop_at`, only the metadata up to that key
    (no tensors: enough to read one field cheaply)."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        c = _Cursor(buf)
        if bytes(buf[:4]) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        c.pos = 4
        version = c.take("<I")
        if version not in (2, 3):
            raise ValueError(f"{path}: GGUF version {version} is not supported")
        n_tensors, n_kv = c.take("<Q"), c.take("<Q")
        header = Header(version, n_kv, (c.pos, c.pos))
        for _ in range(n_kv):
            key = c.string()
            value = c.value(c.take("<I"))
            if value is not None:
                header.fields[key] = value
            if key == stop_at:
                return header
        header.kv_span = (header.kv_span[0], c.pos)
        header.alignment = int(header.fields.get("general.alignment", DEFAULT_ALIGNMENT))
        for _ in range(n_tensors):
            name = c.string()
            dims = tuple(c.take("<Q") for _ in range(c.take("<I")))
            header.tensors.append(TensorInfo(name, dims, c.take("<I"), c.take("<Q")))
        header.data_start = padded(c.pos, header.alignment)
        return header


def padded(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


def context_length(path: Path) -> Optional[int]:
    """`<architecture>.context_length` from the metadata, or None where it has none."""
    arch = read_header(path, stop_at="general.architecture").fields.get("general.architecture")
    if not isinstance(arch, str):
        return None
    key = f"{arch}.context_length"
    fields = read_header(path, stop_at=key).fields
    value = fields.get(key)
    return int(value) if value is not None else None
