"""Weight formats: re-lay a GGUF-derived OpenVINO IR out in the format the CPU runs best, without torch.

OpenVINO GenAI's GGUF reader keeps each weight in its GGUF block layout (u4/u8 values with
per-block scales and zero points, unpacked by a small subgraph in front of every MatMul).
Which layout is fastest depends on the machine (BENCHMARKS.md compares CPUs): on AVX2
without VNNI an f16 main makes verifying K draft tokens almost as cheap as one, while
int8 is the fastest single-token format. So a pypi or gguf model can be
prepared in any of these formats, each its own ready IR folder:

  gguf       the IR the GGUF reader makes (the default; nothing re-quantized)
  f16        every packed weight evaluated once and stored as an f16 constant
  int8       NNCF INT8_SYM, one scale per output channel
  int4_sym   NNCF INT4_SYM, groups of 128 (smaller where a width is not divisible by 128)
  int4_asym  NNCF INT4_ASYM, the same groups, with zero points
  auto       chosen at prepare time by resolve_auto_format()

NNCF cannot compress the GGUF layout as it is (its weights are already integers:
compress_weights silently changes nothing), so the compressed formats start from the f16
folder: the GGUF weights are unpacked once per model and every compressed format reuses
that. The weights are then quantized twice, so check answers on a few prompts.

This module only transforms folders; demo.models.sources decides where they live, locks them and
publishes them atomically.
"""

from __future__ import annotations

import gc
import logging
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Protocol, get_args

import numpy as np

from .presets import WeightFormat

if TYPE_CHECKING:
    from .presets import ModelSpec

DEFAULT_FORMAT = "gguf"
AUTO = "auto"
# Concrete formats, in the order they are derived from each other.
FORMATS: tuple[str, ...] = tuple(f for f in get_args(WeightFormat) if f != AUTO)
COMPRESSED = ("int8", "int4_sym", "int4_asym")
assert set(FORMATS) == {DEFAULT_FORMAT, "f16", *COMPRESSED}

DYNAMIC_QUANTIZATION = "DYNAMIC_QUANTIZATION_GROUP_SIZE"
# Weights are evaluated this many at a time: a batch of f32 copies costs memory.
BATCH = 16
_INTEGER_TYPES = {"u4", "i4", "u8", "i8"}
MODEL_FILES = ("openvino_model.xml", "openvino_model.bin")

# progress(done, total) for a stage the caller names; checkpoint() raises to stop between steps.
StepProgress = Callable[[float, float], None]
Checkpoint = Callable[[], None]


def _nothing(*args) -> None:
    pass


class CalibrationHome(Protocol):
    """All resolve_auto_format reads of the model store (demo.models.sources, which calls it):
    the folder this machine's calibrations live in."""

    cache_dir: Path


def resolve_auto_format(spec: "ModelSpec", role: str, store: CalibrationHome) -> str:
    """The concrete format `auto` stands for, for this model on this machine.

    This machine's calibration (python -m demo.calibrate) answers once it has measured the
    model (race mode's choice, the page's default); before that, the GGUF reader's own IR.
    Cheap (the store's resolve_format calls it for every folder lookup): a few small JSON
    files, and it never asks the store where a model lives (that would call it again).
    """
    from .calibration_store import calibrated_format

    which = "draft" if "draft" in role else "main"  # role: "main model", "draft model", …
    return calibrated_format(spec, store, role=which) or DEFAULT_FORMAT


def derived_from(weight_format: str) -> Optional[str]:
    """The format a format is made from: f16 from gguf, the compressed ones from f16."""
    if weight_format == DEFAULT_FORMAT:
        return None
    return DEFAULT_FORMAT if weight_format == "f16" else "f16"


def chain(weight_format: str) -> list[str]:
    """Every format preparing `weight_format` needs, itself last: int8 -> [gguf, f16, int8]."""
    steps = [weight_format]
    while (prev := derived_from(steps[0])) is not None:
        steps.insert(0, prev)
    return steps


# -- unpacking the GGUF layout to f16 -----------------------------------------------------

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


def _block_value(output) -> Optional[np.ndarray]:
    """The f16 value of the GGUF reader's block layout, Reshape((Convert(q) [- Convert(zp)]) * scale),
    computed with numpy; None for any other subgraph (the compiled path evaluates those).

    Exactly what the CPU plugin computes at f32 precision: (q - zp) is a small integer and the
    scale an f16, so their f32 product is exact and is rounded to f16 once, as there.
    """
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
    q = _integers(_source(values, 0))
    if q is None:
        return None
    w = q.astype(np.float32)
    if zero is not None:
        w -= zero.astype(np.float32)
    w *= np.asarray(scale.get_data(), dtype=np.float32)
    return w.astype(np.float16).reshape(list(output.get_shape()))


def _replace(output, value: np.ndarray) -> None:
    """Feed `output`'s consumers an f16 Constant of `value` (converted back to its type if it had another)."""
    import openvino as ov
    from openvino import opset13 as ops

    target = ops.constant(value, dtype=np.float16).output(0)
    if output.get_element_type() != ov.Type.f16:
        target = ops.convert(target.get_node(), output.get_element_type()).output(0)
    for consumer in list(output.get_target_inputs()):
        if consumer.get_node().get_type_name() != "Result":
            consumer.replace_source_output(target)


def fold_packed_weights(model, progress: Optional[StepProgress] = None,
                        checkpoint: Checkpoint = _nothing) -> int:
    """Replace every packed-weight subgraph by an f16 Constant of its value. Returns the count.

    The GGUF block layout is unpacked with numpy (seconds); any other constant subgraph is
    evaluated by the CPU plugin, BATCH at a time. `checkpoint` runs between weights and
    batches; whatever it raises stops the folding there.
    """
    import openvino as ov
    from openvino import opset13 as ops

    outputs = _weight_outputs(model)
    done, others = 0, []
    for out in outputs:
        checkpoint()
        value = _block_value(out)
        if value is None:
            others.append(out)
            continue
        _replace(out, value)
        done += 1
        if progress:
            progress(done, len(outputs))
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


def fold_to_f16(src: Path, dst: Path, progress: StepProgress = _nothing, checkpoint: Checkpoint = _nothing) -> int:
    """Write src's model with every GGUF-packed weight unpacked to f16 into dst (tokenizers linked)."""
    import openvino as ov

    model = ov.Core().read_model(src / "openvino_model.xml")
    count = fold_packed_weights(model, progress, checkpoint)
    _save(model, dst)
    del model
    gc.collect()
    link_companions(src, dst)
    return count


# -- NNCF ---------------------------------------------------------------------------------

def _nncf_options(weight_format: str) -> dict:
    import nncf

    if weight_format == "int8":
        # INT8 modes are per output channel (no groups) and cover every layer, embeddings too.
        return {"mode": nncf.CompressWeightsMode.INT8_SYM}
    mode = {"int4_sym": nncf.CompressWeightsMode.INT4_SYM, "int4_asym": nncf.CompressWeightsMode.INT4_ASYM}
    return {
        "mode": mode[weight_format], "group_size": 128, "ratio": 1.0, "all_layers": True,
        # widths not divisible by 128 (SmolLM2: 576) get a smaller group instead of failing
        "advanced_parameters": nncf.AdvancedCompressionParameters(
            group_size_fallback_mode=nncf.GroupSizeFallbackMode.ADJUST),
    }


@contextmanager
def _quiet_nncf():
    """NNCF prints an INFO table per model; the CLI's progress bars say enough."""
    import nncf

    logger = logging.getLogger("nncf")
    level = logger.level
    nncf.set_log_level(logging.WARNING)
    try:
        yield
    finally:
        nncf.set_log_level(level or logging.INFO)


def compress(src: Path, dst: Path, weight_format: str, checkpoint: Checkpoint = _nothing) -> None:
    """Write src's model (an f16 folder) compressed by NNCF to `weight_format` into dst."""
    import openvino as ov

    if weight_format not in COMPRESSED:
        raise ValueError(f"{weight_format!r} is not one of {COMPRESSED}")
    checkpoint()
    _compress_model(ov.Core().read_model(src / "openvino_model.xml"), src, dst, weight_format, checkpoint)


def unpack_and_compress(src: Path, dst: Path, weight_format: str, progress: StepProgress = _nothing,
                        checkpoint: Checkpoint = _nothing) -> None:
    """Write src's model (the GGUF reader's IR) compressed to `weight_format` into dst, its
    weights unpacked to f16 in memory only: the same model as fold_to_f16 then compress,
    without writing the f16 folder (3 GB for a 1.5B main) and reading it back."""
    import openvino as ov

    if weight_format not in COMPRESSED:
        raise ValueError(f"{weight_format!r} is not one of {COMPRESSED}")
    model = ov.Core().read_model(src / "openvino_model.xml")
    fold_packed_weights(model, progress, checkpoint)
    _compress_model(model, src, dst, weight_format, checkpoint)


def _compress_model(model, src: Path, dst: Path, weight_format: str, checkpoint: Checkpoint) -> None:
    import nncf

    options = _nncf_options(weight_format)
    with _quiet_nncf():
        model = nncf.compress_weights(model, **options)
    if "group_size" in options:
        # Quantize activations in the weights' own groups: a 7-token verify of the int4_sym 1.5B
        # main on the AMX Xeon takes 64 ms with 128 against 69 ms with the CPU plugin's 32
        # (one token: the same; BENCHMARKS.md). OpenVINO applies runtime_options at compile
        # time unless the caller sets the property itself (exact mode sets 0).
        model.set_rt_info(str(options["group_size"]), ["runtime_options", DYNAMIC_QUANTIZATION])
    checkpoint()
    _save(model, dst)
    del model
    gc.collect()
    link_companions(src, dst)


# -- files --------------------------------------------------------------------------------

def _save(model, dst: Path) -> None:
    import openvino as ov

    # compress_to_fp16=False: keep the types chosen here (f32 norms stay f32, as in the GGUF IR).
    ov.save_model(model, dst / "openvino_model.xml", compress_to_fp16=False)


def link_companions(src: Path, dst: Path) -> None:
    """Hard-link (or copy) everything but the model itself: tokenizer and detokenizer IR, configs."""
    for entry in src.iterdir():
        if entry.name in MODEL_FILES or entry.name.startswith(".") or not entry.is_file():
            continue
        target = dst / entry.name
        if target.exists():
            continue
        try:
            os.link(entry, target)
        except OSError:  # another file system, or links not allowed
            shutil.copyfile(entry, target)


# -- in a child process (demo.core.isolation): conversions are native work not yet proven here --

# Conversions are background work (calibration's candidates, a format asked for once): a
# race or a first load running beside them keeps the CPU first.
CONVERSION_NICE = 10


def convert_in_child(kind: str, src: Path, dst: Path, weight_format: str, progress: StepProgress,
                     checkpoint: Checkpoint) -> None:
    """fold_to_f16 (kind "f16"), compress, or both at once (kind "unpack+compress"), in a child:
    a crash there is a sentence, not the app."""
    from ..core import isolation

    def on_message(message: str) -> None:
        done, total = (float(x) for x in message.split("/"))
        progress(done, total)

    isolation.run("demo.models.formats:_convert_child", {"kind": kind, "src": str(src), "dst": str(dst),
                                                  "format": weight_format},
                  what=f"converting {src.name} to {weight_format}", on_message=on_message, checkpoint=checkpoint,
                  nice=CONVERSION_NICE)


def _convert_child(args: dict, send) -> dict:
    src, dst = Path(args["src"]), Path(args["dst"])
    if args["kind"] == "f16":
        fold_to_f16(src, dst, lambda done, total: send(f"{done}/{total}"))
    elif args["kind"] == "unpack+compress":
        unpack_and_compress(src, dst, args["format"], lambda done, total: send(f"{done}/{total}"))
    else:
        compress(src, dst, args["format"])
    return {}
