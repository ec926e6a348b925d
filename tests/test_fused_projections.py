"""Merged projections (demo/models/fused_projections.py): fewer matmuls, the same outputs.

A small graph laid out as NNCF writes int4 weights (4-bit values, a zero point per group in
int4_asym, a scale per group of 128, a Convert to f32) is run by OpenVINO's CPU plugin before and after the merge, on the
same random input: the unmerged graph is the reference. The merge on a real model (SmolLM2,
made by the int4_sym format) is checked in tests/test_formats.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from demo.models.fused_projections import fuse_projections

pytestmark = pytest.mark.fast

HIDDEN, GROUP = 384, 128  # 3 groups a row: a row of 4-bit zero points ends mid-byte


def four_bit(rng, etype, shape):
    """A 4-bit Constant of random values."""
    import openvino as ov

    t = ov.Tensor(etype, ov.Shape(shape))
    t.data.reshape(-1)[:] = rng.integers(0, 256, size=t.data.size, dtype=np.uint8).view(t.data.dtype)
    return ov.op.Constant(t, shared_memory=False)


def int4_weight(rng, rows: int, zero_point: bool = False):
    """Const(i4, or u4 with zero points [rows, groups, 1] as int4_asym and the GGUF reader write
    them) -> Convert -> [Subtract(Convert(zero point))] -> Multiply(scale) -> Reshape -> Convert f32."""
    import openvino as ov
    from openvino import opset13 as ops

    shape = [rows, HIDDEN // GROUP, GROUP]
    w = ops.convert(four_bit(rng, ov.Type.u4 if zero_point else ov.Type.i4, shape), ov.Type.f16)
    if zero_point:
        w = ops.subtract(w, ops.convert(four_bit(rng, ov.Type.u4, shape[:2] + [1]), ov.Type.f16))
    w = ops.multiply(w, ops.constant((rng.random(shape[:2] + [1]) * 0.02 + 0.01).astype(np.float16)))
    return ops.convert(ops.reshape(w, ops.constant(np.array([rows, HIDDEN], dtype=np.int64)), False), ov.Type.f32)


def layer(zero_points: tuple = ()):
    """x -> one norm -> q, k, v (biased, as Qwen2's); x -> another -> gate, up (no bias); five results."""
    import openvino as ov
    from openvino import opset13 as ops

    rng = np.random.default_rng(0)
    x = ops.parameter([1, -1, HIDDEN], ov.Type.f32, name="x")
    attention, mlp = (ops.multiply(x, ops.constant(rng.random((1, 1, HIDDEN)).astype(np.float32))) for _ in range(2))
    outputs = []
    for name, rows, bias in (("q", 256, True), ("k", 128, True), ("v", 128, True), ("gate", 384, False),
                             ("up", 384, False)):
        mm = ops.matmul(mlp if name in ("gate", "up") else attention, int4_weight(rng, rows, zero_point=name in zero_points), False, True)
        if bias:
            mm = ops.add(mm, ops.convert(ops.constant(rng.standard_normal(rows).astype(np.float16)), ov.Type.f32))
        outputs.append(ops.result(ops.relu(mm), name=name))
    return ov.Model(outputs, [x], "layer")


def run(model, x):
    import openvino as ov

    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32",
                                                      "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"})
    return [compiled({"x": x})[out] for out in compiled.outputs]


def matmuls(model) -> int:
    return sum(op.get_type_name() == "MatMul" for op in model.get_ordered_ops())


def adds(model) -> int:
    return sum(op.get_type_name() == "Add" for op in model.get_ordered_ops())


def test_projections_reading_one_input_become_one_matmul_each_group_with_the_same_outputs():
    x = np.random.default_rng(1).standard_normal((1, 3, HIDDEN)).astype(np.float32)
    reference = run(layer(), x)
    model = layer()
    assert fuse_projections(model) == 2  # q/k/v and gate/up
    assert matmuls(model) == 2
    assert adds(model) == 1  # q/k/v's biases, added once
    for want, got in zip(reference, run(model, x)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert [o.get_any_name() for o in model.outputs] == ["q", "k", "v", "gate", "up"]


def test_only_groups_of_the_sizes_asked_for_are_merged():
    x = np.random.default_rng(5).standard_normal((1, 2, HIDDEN)).astype(np.float32)
    reference = run(layer(), x)
    model = layer()
    assert fuse_projections(model, sizes=(3,)) == 1  # q/k/v; gate and up stay two matmuls
    assert matmuls(model) == 3 and adds(model) == 1
    for want, got in zip(reference, run(model, x)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    untouched = layer()
    assert fuse_projections(untouched, sizes=()) == 0 and matmuls(untouched) == 5


def test_weights_laid_out_differently_are_not_stacked_together():
    x = np.random.default_rng(2).standard_normal((1, 2, HIDDEN)).astype(np.float32)
    reference = run(layer(zero_points=("v",)), x)
    model = layer(zero_points=("v",))
    assert fuse_projections(model) == 2
    assert matmuls(model) == 3  # v (zero points) on its own; q/k and gate/up merged
    assert adds(model) == 2  # q/k's biases once, v's its own
    for want, got in zip(reference, run(model, x)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_weights_with_zero_points_merge_with_their_zero_points():
    """int4_asym and the GGUF reader's IR: 4-bit values minus a 4-bit zero point per group."""
    x = np.random.default_rng(3).standard_normal((1, 3, HIDDEN)).astype(np.float32)
    every = ("q", "k", "v", "gate", "up")
    reference = run(layer(zero_points=every), x)
    model = layer(zero_points=every)
    assert fuse_projections(model) == 2
    assert matmuls(model) == 2
    for want, got in zip(reference, run(model, x)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_bias_that_does_not_span_its_projection_is_not_stacked():
    """A constant added to every column (shape [1]) is not a bias vector to concatenate."""
    import openvino as ov
    from openvino import opset13 as ops

    rng = np.random.default_rng(4)
    x = ops.parameter([1, -1, HIDDEN], ov.Type.f32, name="x")
    outs = [ops.result(ops.add(ops.matmul(x, int4_weight(rng, rows), False, True),
                               ops.constant(np.array([0.5 * i + 1], dtype=np.float32))), name=f"p{i}")
            for i, rows in enumerate((128, 256))]
    model = ov.Model(outs, [x])
    reference = run(model.clone(), np.ones((1, 2, HIDDEN), dtype=np.float32))
    assert fuse_projections(model) == 1
    assert adds(model) == 2  # each keeps its own Add
    for want, got in zip(reference, run(model, np.ones((1, 2, HIDDEN), dtype=np.float32))):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_graph_without_compressed_weights_is_unchanged():
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter([1, 4, HIDDEN], ov.Type.f32, name="x")
    w = ops.constant(np.ones((8, HIDDEN), dtype=np.float32))
    model = ov.Model([ops.result(ops.matmul(x, w, False, True)), ops.result(ops.matmul(x, w, False, True))], [x])
    assert fuse_projections(model) == 0
    assert matmuls(model) == 2
