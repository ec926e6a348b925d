"""Unpack the GGUF reader's weight layout to f16 constants: the first step of every format but gguf.

OpenVINO GenAI's GGUF reader keeps each weight in its GGUF block layout, u4/u8 values with
per-block f16 scales (and zero points), unpacked by a small subgraph in front of every MatMul
or Gather. NNCF needs float weights, so demo.models.formats replaces each such subgraph by an
f16 Constant of its value before compressing.

The block layout, Reshape((Convert(q) [- Convert(zp)]) * scale), is evaluated by one small
compiled model per value type, fed CHUNK blocks at a time and writing straight into the array
the new Constant then shares: the CPU plugin converts on every core without touching a fresh
f32 copy of the weight. numpy took 17-20 s for the 1.5B main on a 2-core Zen 4 (half of it the
f32 -> f16 cast), this 8-11 s, and NNCF then writes the same bytes (BENCHMARKS.md). Any other
constant subgraph is evaluated by the CPU plugin as it is, BATCH weights at a time.
"""

from __future__ import annotations

import gc
from typing import Callable, NamedTuple, Optional

import numpy as np

# progress(done, total); checkpoint() raises to stop between weights.
StepProgress = Callable[[float, float], None]
Checkpoint = Callable[[], None]

# Blocks per inference: one shape for every chunk keeps the plugin's buffers warm (a new
# shape per weight reallocated them and doubled the time).
CHUNK = 1 << 20
# Other subgraphs are evaluated this many at a time: a batch of f32 copies costs memory.
BATCH = 16
_INTEGER_TYPES = {"u4", "i4", "u8", "i8"}


def _nothing(*args) -> None:
    pass


def _const_only_root(output) -> bool:
    """True if the subgraph feeding `output` has only Constant leaves, one of them a packed integer weight."""
    stack, seen, packed = [output.get_node()], set(), False
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        kind = node.get_type_name()
        if kind == "Parameter" or kind in ("ReadValue", "ShapeOf"):
            return False
        if kind == "Constant":
            et = node.get_output_element_type(0).get_type_name()
            if et in _INTEGER_TYPES and int(np.prod(list(node.get_output_shape(0)))) >= 4096:
                packed = True
            continue
        stack.extend(i.get_source_output().get_node() for i in node.inputs())
    return packed


def weight_outputs(model) -> list:
    """The outputs that carry a packed weight into a MatMul (input 1) or Gather (input 0)."""
    found = []
    for node in model.get_ordered_ops():
        kind = node.get_type_name()
        if kind not in ("MatMul", "Gather"):
            continue
        out = node.input(1 if kind == "MatMul" else 0).get_source_output()
        # Keep a trailing Convert(f16 -> f32): NNCF recognises Constant(f16) -> Convert -> MatMul.
        if out.get_node().get_type_name() == "Convert":
            out = out.get_node().input(0).get_source_output()
        if _const_only_root(out):
            found.append(out)
    # A tied embedding / lm_head weight feeds two consumers: fold it once.
    unique, seen = [], set()
    for out in found:
        key = (out.get_node().get_friendly_name(), out.get_index())
        if key not in seen:
            seen.add(key)
            unique.append(out)
    return unique


def _integers(const) -> Optional[np.ndarray]:
    """A u4/u8 Constant's values as uint8 in its own shape (u4: two per byte, low nibble first)."""
    kind = const.get_output_element_type(0).get_type_name()
    shape = list(const.get_output_shape(0))
    raw = np.asarray(const.get_data()).reshape(-1)
    if kind == "u8":
        return raw.reshape(shape)
    if kind != "u4":
        return None
    count = int(np.prod(shape))
    values = np.empty(raw.size * 2, dtype=np.uint8)
    np.bitwise_and(raw, 0x0F, out=values[0::2])
    np.right_shift(raw, 4, out=values[1::2])
    return values[:count].reshape(shape)


def _source(node, index: int):
    return node.input(index).get_source_output().get_node()


class Blocks(NamedTuple):
    """One weight in the GGUF reader's block layout: values [..., n] (u4 or u8), a zero point
    and an f16 scale per block of n ([..., 1])."""

    values: object
    zero: Optional[np.ndarray]  # uint8, or None where the layout has no zero point
    scale: object


def blocks_of(output) -> Optional[Blocks]:
    """`output`'s block layout, Reshape((Convert(q) [- Convert(zp)]) * scale) with an f16
    scale and u4/u8 integers; None for any other subgraph (the plugin evaluates those)."""
    reshape = output.get_node()
    if reshape.get_type_name() != "Reshape" or output.get_element_type().get_type_name() != "f16":
        return None
    multiply = _source(reshape, 0)
    if multiply.get_type_name() != "Multiply":
        return None
    values, scale = _source(multiply, 0), _source(multiply, 1)
    if scale.get_type_name() != "Constant" or scale.get_output_element_type(0).get_type_name() != "f16":
        return None
    zero = None
    if values.get_type_name() == "Subtract":
        values, zero = _source(values, 0), _source(values, 1)
        if zero.get_type_name() != "Convert" or _source(zero, 0).get_type_name() != "Constant":
            return None
        zero = _integers(_source(zero, 0))
        if zero is None:
            return None
    if values.get_type_name() != "Convert" or _source(values, 0).get_type_name() != "Constant":
        return None
    values = _source(values, 0)
    kind, shape = values.get_output_element_type(0).get_type_name(), list(values.get_output_shape(0))
    if kind not in ("u4", "u8") or (kind == "u4" and shape[-1] % 2) or list(scale.get_output_shape(0)) != shape[:-1] + [1]:
        return None
    if zero is not None and list(zero.shape) != shape[:-1] + [1]:
        return None
    return Blocks(values, zero, scale)


class Dequantizer:
    """Evaluates block layouts with the CPU plugin: one compiled model per value type and
    zero point, Convert(q) [- Convert(zp)] * Convert(scale) -> f16, at f32 precision.

    Exactly what the GGUF reader's subgraph computes at f32: (q - zp) is a small integer and
    the scale an f16, so their f32 product is exact and is rounded to f16 once."""

    def __init__(self):
        self._requests: dict = {}

    def _request(self, values_type, with_zero: bool):
        import openvino as ov
        from openvino import opset13 as ops

        key = (values_type.get_type_name(), with_zero)
        if key not in self._requests:
            q = ops.parameter([-1, -1], values_type, name="q")
            scale = ops.parameter([-1, 1], ov.Type.f16, name="scale")
            params, w = [q, scale], ops.convert(q, ov.Type.f32)
            if with_zero:
                zero = ops.parameter([-1, 1], ov.Type.u8, name="zero")
                params.append(zero)
                w = ops.subtract(w, ops.convert(zero, ov.Type.f32))
            w = ops.convert(ops.multiply(w, ops.convert(scale, ov.Type.f32)), ov.Type.f16)
            model = ov.Model([ops.result(w)], params, "dequantize")
            compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
            self._requests[key] = compiled.create_infer_request()
        return self._requests[key]

    def value(self, blocks: Blocks) -> np.ndarray:
        """The weight as f16, shaped as its block values ([..., n])."""
        import openvino as ov

        shape = list(blocks.values.get_output_shape(0))
        n, count = shape[-1], int(np.prod(shape[:-1]))
        kind = blocks.values.get_output_element_type(0)
        packed = np.asarray(blocks.values.get_data()).reshape(count, -1)  # one row of bytes per block
        scale = np.asarray(blocks.scale.get_data()).reshape(count, 1)
        zero = None if blocks.zero is None else blocks.zero.reshape(count, 1)
        request = self._request(kind, zero is not None)
        result = np.empty((count, n), dtype=np.float16)
        for a in range(0, count, CHUNK):
            b = min(count, a + CHUNK)
            request.set_output_tensor(ov.Tensor(result[a:b], shared_memory=True))
            inputs = {"q": ov.Tensor(packed[a:b], [b - a, n], kind), "scale": scale[a:b]}
            if zero is not None:
                inputs["zero"] = zero[a:b]
            request.infer(inputs)
        return result.reshape(shape)


def _replace(output, value: np.ndarray) -> None:
    """Feed `output`'s consumers an f16 Constant sharing `value` (converted back to its type if it had another)."""
    import openvino as ov
    from openvino import opset13 as ops

    target = ops.constant(value, dtype=np.float16, shared_memory=True).output(0)
    if output.get_element_type() != ov.Type.f16:
        target = ops.convert(target.get_node(), output.get_element_type()).output(0)
    for consumer in list(output.get_target_inputs()):
        if consumer.get_node().get_type_name() != "Result":
            consumer.replace_source_output(target)


def fold_packed_weights(model, progress: Optional[StepProgress] = None, checkpoint: Checkpoint = _nothing) -> int:
    """Replace every packed-weight subgraph by an f16 Constant of its value. Returns the count.

    `checkpoint` runs between weights and batches; whatever it raises stops the folding there.
    """
    import openvino as ov
    from openvino import opset13 as ops

    outputs = weight_outputs(model)
    done, others, dequantizer = 0, [], Dequantizer()
    for out in outputs:
        checkpoint()
        blocks = blocks_of(out)
        if blocks is None:
            others.append(out)
            continue
        _replace(out, dequantizer.value(blocks).reshape(list(out.get_shape())))
        done += 1
        if progress:
            progress(done, len(outputs))
    del dequantizer
    core = ov.Core()
    for start in range(0, len(others), BATCH):
        checkpoint()
        batch = others[start:start + BATCH]
        probe = ov.Model([ops.result(o) for o in batch], [], "weights")
        values = core.compile_model(probe, "CPU", {"INFERENCE_PRECISION_HINT": "f32"}).create_infer_request()
        values.infer()
        for i, out in enumerate(batch):
            _replace(out, values.get_output_tensor(i).data.astype(np.float16))
        del values, probe
        gc.collect()
        done += len(batch)
        if progress:
            progress(done, len(outputs))
    checkpoint()
    return len(outputs)
