"""Bytes of weights one decoding step reads, and the machine's memory read bandwidth: the
physical limit a single-token decode runs against (BENCHMARKS.md's per-CPU tables).

A decoding step reads every weight once, except an embedding table that only feeds a
lookup (one row a token). Where the output layer is tied to the embeddings, the table is
read whole by the output layer, so it counts. Bytes per token times decode tokens per second
is the bandwidth a configuration achieves; against the measured read bandwidth it says how
close to the memory limit an engine runs.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

# What a compressed weight passes through before its real consumer (decompression, layout).
_PASS_THROUGH = {"Convert", "Subtract", "Multiply", "Reshape", "Transpose", "Unsqueeze", "Squeeze"}
_BIG = 1 << 20  # constants smaller than this (norms, biases, scales) are counted as read


def ir_bytes_per_token(folder: Path) -> dict:
    """{"total": bytes in openvino_model.bin's constants, "per_token": what one step reads,
    "lookup_only": bytes of tables that only feed a Gather}, from the IR's graph."""
    import openvino as ov

    model = ov.Core().read_model(str(Path(folder) / "openvino_model.xml"))
    total = lookup = 0
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Constant":
            continue
        size = int(op.get_byte_size())
        total += size
        if size >= _BIG and _feeds_only_lookups(op):
            lookup += size
    return {"total": total, "per_token": total - lookup, "lookup_only": lookup}


def _feeds_only_lookups(node) -> bool:
    ends, todo, seen = [], [node], set()
    while todo:
        n = todo.pop()
        for out in n.outputs():
            for port in out.get_target_inputs():
                user = port.get_node()
                if user.get_friendly_name() in seen:
                    continue
                seen.add(user.get_friendly_name())
                (todo if user.get_type_name() in _PASS_THROUGH else ends).append(user)
    # A table is a lookup table when it only reaches Gathers, as their data input (port 0).
    return bool(ends) and all(e.get_type_name().startswith("Gather") for e in ends)


def gguf_bytes_per_token(path: Path) -> dict:
    """The same for a GGUF file as llama.cpp reads it: token_embd is read whole only when the
    model has no output.weight of its own (tied output layer)."""
    from gguf import GGUFReader

    tensors = {t.name: int(t.n_bytes) for t in GGUFReader(str(path)).tensors}
    total = sum(tensors.values())
    lookup = tensors.get("token_embd.weight", 0) if "output.weight" in tensors else 0
    return {"total": total, "per_token": total - lookup, "lookup_only": lookup}


def memory_read_gb_s(threads: int, size_bytes: int = 1 << 30, repeats: int = 5) -> float:
    """The best of `repeats` reads of a `size_bytes` array by `threads` threads (numpy max,
    the fastest numpy reduction here, which releases the GIL), in GB/s: the read bandwidth a decode sees."""
    import numpy as np

    data = np.ones(size_bytes // 4, dtype=np.float32)
    parts = np.array_split(data, threads)
    best = float("inf")
    for _ in range(repeats):
        start = threading.Barrier(threads + 1)
        workers = [threading.Thread(target=lambda p=p: (start.wait(), p.max())) for p in parts]
        for w in workers:
            w.start()
        start.wait()
        t0 = time.perf_counter()
        for w in workers:
            w.join()
        best = min(best, time.perf_counter() - t0)
    return data.nbytes / best / 1e9
