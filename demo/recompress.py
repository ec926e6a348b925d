"""Re-compress a GGUF-derived OpenVINO IR to NNCF int4, without torch.

OpenVINO GenAI's GGUF reader keeps each weight in its GGUF block format (u4/u8 values with
per-block scales and zero points, dequantized by a small subgraph in front of every
MatMul). The CPU plugin runs those slower than the int4 layout NNCF produces (models.md:
main 12–15 tok/s vs 17–21 tok/s with an optimum-intel int4 export of the same weights).
NNCF cannot compress them as they are (they are already integers), so we first evaluate
each decompression subgraph to its f16 value, then let NNCF compress to INT4_ASYM with
group size 128, as optimum-intel does for these models.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Callable, Optional

import numpy as np

# Weights are evaluated this many at a time: a batch of f32 copies costs memory.
BATCH = 16
_INTEGER_TYPES = {"u4", "i4", "u8", "i8"}


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


def _weight_outputs(model) -> list:
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


def fold_packed_weights(model, progress: Optional[Callable[[int, int], None]] = None) -> int:
    """Replace every packed-weight subgraph by an f16 Constant of its value. Returns the count."""
    import openvino as ov
    from openvino import opset13 as ops

    core = ov.Core()
    outputs = _weight_outputs(model)
    for start in range(0, len(outputs), BATCH):
        batch = outputs[start:start + BATCH]
        probe = ov.Model([ops.result(o) for o in batch], [], "weights")
        values = core.compile_model(probe, "CPU", {"INFERENCE_PRECISION_HINT": "f32"}).create_infer_request()
        values.infer()
        for i, out in enumerate(batch):
            value = values.get_output_tensor(i).data.astype(np.float16)
            const = ops.constant(value, dtype=np.float16)
            target = const.output(0)
            if out.get_element_type() != ov.Type.f16:
                target = ops.convert(const, out.get_element_type()).output(0)
            for consumer in list(out.get_target_inputs()):
                if consumer.get_node().get_type_name() != "Result":
                    consumer.replace_source_output(target)
        del values, probe
        gc.collect()
        if progress:
            progress(min(start + BATCH, len(outputs)), len(outputs))
    return len(outputs)


def recompress_int4(folder: Path, progress: Optional[Callable[[str, float, float], None]] = None,
                    all_layers: bool = True) -> None:
    """Rewrite folder/openvino_model.xml|bin in place as NNCF INT4_ASYM (group 128)."""
    import nncf
    import openvino as ov

    report = progress or (lambda stage, done, total: None)
    xml = folder / "openvino_model.xml"
    model = ov.Core().read_model(xml)
    fold_packed_weights(model, lambda d, t: report("unpacking GGUF weights", d, t))
    report("compressing weights to int4 with NNCF", 0, 0)
    model = nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT4_ASYM, group_size=128, ratio=1.0,
                                  all_layers=all_layers,
                                  # widths not divisible by 128 (SmolLM2: 576) get a smaller group
                                  advanced_parameters=nncf.AdvancedCompressionParameters(
                                      group_size_fallback_mode=nncf.GroupSizeFallbackMode.ADJUST))
    tmp_xml = folder / "openvino_model.int4.xml"
    ov.save_model(model, tmp_xml, compress_to_fp16=False)
    del model
    gc.collect()
    for ext in (".xml", ".bin"):
        (folder / f"openvino_model.int4{ext}").replace(folder / f"openvino_model{ext}")
    report("compressing weights to int4 with NNCF", 1, 1)
