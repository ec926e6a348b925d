"""Merge the projections of a compressed IR that read the same input into one wider matmul.

OpenVINO's CPU plugin runs every projection of a decoder layer as its own FullyConnected
node: q, k, v, o, gate, up, down, seven a layer (169 in Qwen2.5-Coder-0.5B, 197 in the 1.5B):
on the Zen 5 measured, its runtime model of the int4_sym IR keeps the seven apart. At one token a
step each is a small matrix-vector product that pays a fixed cost (a parallel region across
the threads, the activation's dynamic quantization), which a small draft feels most: on a
Zen 5 the int4_sym 0.5B draft read its weights at half the machine's bandwidth. Merged, q/k/v
become one matmul and gate/up another (4 a layer): the speculative pipeline ran 1.09× as
fast there (9 prompt pairs, 1.02-1.18), the main alone 1.01× (BENCHMARKS.md).

Each group of MatMuls fed by the same tensor whose weights are 4-bit constants laid out
alike ([N, groups, group size] values, minus a per-group zero point in int4_asym and the GGUF
reader's IR, times a per-group scale) becomes one MatMul over the weights stacked on the output
axis (each constant's packed bytes concatenated, the scales and zero points likewise), with
their bias vectors, if every one has one, added before a VariadicSplit that hands each former
consumer its columns. Every output column is computed from the same weights and the same input
as before: the logits are unchanged (tests/test_fused_projections.py checks them against the
unmerged graph).
"""

from __future__ import annotations

from typing import Collection, NamedTuple, Optional

import numpy as np


class _Weight(NamedTuple):
    values: object            # Constant, int4/uint4 [N, groups, group size]
    scale: object             # Constant [N, groups, 1]
    dequantized: object       # the element type the values are converted to before scaling
    widened: Optional[object]  # the element type of a Convert after the Reshape, if any
    zero_point: Optional[object] = None  # Constant [N, groups, 1] subtracted before scaling, if any

    def layout(self) -> tuple:
        """What must agree for weights to be stacked: types, the shape past the rows, zero points."""
        zp = self.zero_point
        return (str(self.values.get_element_type()), tuple(self.values.get_shape())[1:],
                str(self.scale.get_element_type()), str(self.dequantized), str(self.widened),
                None if zp is None else (str(zp.get_element_type()), tuple(zp.get_shape())[1:]))


def _compressed_weight(matmul) -> Optional[_Weight]:
    """The weight of `matmul` when it is Const(4-bit) -> Convert [-> Subtract(Convert(Const zero
    point))] -> Multiply(Const scale) -> Reshape [-> Convert]: NNCF's int4 layouts and the GGUF
    reader's; None for anything else."""
    node = matmul.input_value(1).get_node()
    widened = None
    if node.get_type_name() == "Convert":
        widened, node = node.get_output_element_type(0), node.input_value(0).get_node()
    if node.get_type_name() != "Reshape":
        return None
    multiply = node.input_value(0).get_node()
    if multiply.get_type_name() != "Multiply":
        return None
    convert, scale = multiply.input_value(0).get_node(), multiply.input_value(1).get_node()
    zero_point = None
    if convert.get_type_name() == "Subtract":
        zp_convert, convert = convert.input_value(1).get_node(), convert.input_value(0).get_node()
        if zp_convert.get_type_name() != "Convert" or \
                zp_convert.get_output_element_type(0) != convert.get_output_element_type(0):
            return None
        zero_point = zp_convert.input_value(0).get_node()
        if zero_point.get_type_name() != "Constant" or zero_point.get_element_type().bitwidth != 4:
            return None
    if convert.get_type_name() != "Convert" or scale.get_type_name() != "Constant":
        return None
    values = convert.input_value(0).get_node()
    if values.get_type_name() != "Constant" or values.get_element_type().bitwidth != 4:
        return None
    if any(int(np.prod(list(c.get_shape()))) * c.get_element_type().bitwidth % 8
           for c in (values, scale, zero_point) if c is not None):
        return None  # a constant ending mid-byte cannot be stacked as bytes
    return _Weight(values, scale, convert.get_output_element_type(0), widened, zero_point)


def _bias(matmul):
    """(the Add, its bias Constant, the bias's Convert type or None) when the MatMul's only
    consumer adds a constant vector (Qwen2's q/k/v biases); else None."""
    targets = list(matmul.output(0).get_target_inputs())
    if len(targets) != 1 or targets[0].get_node().get_type_name() != "Add":
        return None
    add = targets[0].get_node()
    other = add.input_value(1 - targets[0].get_index()).get_node()
    widened = None
    if other.get_type_name() == "Convert":
        widened, other = other.get_output_element_type(0), other.input_value(0).get_node()
    shape = list(other.get_shape()) if other.get_type_name() == "Constant" else []
    if not shape or int(np.prod(shape)) != shape[-1]:
        return None
    return add, other, widened


def _stack(constants):
    """One Constant: `constants` stacked on axis 0, as bytes (packed 4-bit types too: each
    constant fills whole bytes, which _compressed_weight checked, so the next starts on a byte)."""
    import openvino as ov

    shapes = [list(c.get_shape()) for c in constants]
    stacked = np.concatenate([np.frombuffer(c.get_data().tobytes(), dtype=np.uint8) for c in constants])
    tensor = ov.Tensor(constants[0].get_element_type(), ov.Shape([sum(s[0] for s in shapes)] + shapes[0][1:]))
    tensor.data.reshape(-1)[:] = stacked.view(tensor.data.dtype)
    return ov.op.Constant(tensor, shared_memory=False)


def _groups(model) -> list[list]:
    """The MatMuls to merge: groups of two or more reading the same tensor, weights alike."""
    groups: dict = {}
    for op in model.get_ordered_ops():
        if op.get_type_name() != "MatMul":
            continue
        attrs, weight = op.get_attributes(), _compressed_weight(op)
        if weight is None or attrs["transpose_a"] or not attrs["transpose_b"]:
            continue
        source = op.input_value(0)
        key = (source.get_node().get_name(), source.get_index(), weight.layout())
        groups.setdefault(key, []).append((op, weight))
    return [g for g in groups.values() if len(g) > 1]


def fuse_projections(model, sizes: Optional[Collection[int]] = None) -> int:
    """Merge, in place, every group of compressed projections that read the same tensor (only
    groups of `sizes` projections when given: 3 is Qwen2's q/k/v, 2 its gate/up); the number of
    groups merged."""
    from openvino import opset13 as ops

    groups = [g for g in _groups(model) if sizes is None or len(g) in sizes]
    for group in groups:
        matmuls, weights = zip(*group)
        rows = [int(w.values.get_shape()[0]) for w in weights]
        width = int(np.prod(list(weights[0].values.get_shape())[1:]))
        w = ops.convert(_stack([w.values for w in weights]), weights[0].dequantized)
        if weights[0].zero_point is not None:
            w = ops.subtract(w, ops.convert(_stack([w.zero_point for w in weights]), weights[0].dequantized))
        w = ops.multiply(w, _stack([w.scale for w in weights]))
        w = ops.reshape(w, ops.constant(np.array([sum(rows), width], dtype=np.int64)), special_zero=False)
        if weights[0].widened is not None:
            w = ops.convert(w, weights[0].widened)
        merged = ops.matmul(matmuls[0].input_value(0), w, transpose_a=False, transpose_b=True)
        outputs = list(matmuls)
        biases = [_bias(m) for m in matmuls]
        if all(b and int(b[1].get_shape()[-1]) == r for b, r in zip(biases, rows)) and \
                len({(str(c.get_element_type()), str(t)) for _, c, t in biases}) == 1:
            # One Add before the split, so the plugin folds it into the merged matmul as it did into each.
            bias = ops.constant(np.concatenate([c.get_data().reshape(-1) for _, c, _ in biases]))
            merged = ops.add(merged, bias if biases[0][2] is None else ops.convert(bias, biases[0][2]))
            outputs = [add for add, _, _ in biases]
        split = ops.variadic_split(merged, ops.constant(np.int64(-1)), ops.constant(np.array(rows, dtype=np.int64)))
        for i, old in enumerate(outputs):
            for target in list(old.output(0).get_target_inputs()):
                target.replace_source_output(split.output(i))
    model.validate_nodes_and_infer_types()
    return len(groups)
