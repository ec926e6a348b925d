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
  int4_sym   NNCF INT4_SYM, groups of 128 (smaller where a width is not divisible by 128), the
             projections that read the same input merged (demo.models.fused_projections)
  int4_asym  NNCF INT4_ASYM, the same groups, with zero points, merged alike
  int4_channel  NNCF INT4_SYM with one scale per output channel (no groups, nothing merged): less
             work per weight (on a Zen 4 a token of the 1.5B main alone took 0.71x int4_sym's,
             bare) for a coarser fit (its greedy choices followed the original weights' on 92 %
             of tokens against int4_sym's 97 %; SmolLM2-135M's answers fall apart): calibration
             holds every main to 90 % agreement and never chooses this one unread (COARSE)
  auto       chosen at prepare time by resolve_auto_format()

NNCF cannot compress the GGUF layout as it is (its weights are already integers:
compress_weights silently changes nothing), so the compressed formats start from the f16
folder: the GGUF weights are unpacked once per model (demo.models.gguf_unpack) and every
compressed format reuses that, or unpacks in memory when there is no f16 folder
(unpack_and_compress). The weights are then quantized twice, so check answers on a few prompts.

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
from typing import TYPE_CHECKING, Collection, Optional, Protocol, get_args

from .fused_projections import fuse_projections
from .gguf_unpack import Checkpoint, StepProgress, fold_packed_weights
from .presets import WeightFormat

if TYPE_CHECKING:
    from .presets import ModelSpec

DEFAULT_FORMAT = "gguf"
AUTO = "auto"
# Concrete formats, in the order they are derived from each other.
FORMATS: tuple[str, ...] = tuple(f for f in get_args(WeightFormat) if f != AUTO)
COMPRESSED = ("int8", "int4_sym", "int4_asym", "int4_channel")
assert set(FORMATS) == {DEFAULT_FORMAT, "f16", *COMPRESSED}

# Formats coarse enough that a model can fall apart in them: chosen only where their quality was read.
COARSE = ("int4_channel",)

DYNAMIC_QUANTIZATION = "DYNAMIC_QUANTIZATION_GROUP_SIZE"
MODEL_FILES = ("openvino_model.xml", "openvino_model.bin")


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
    mode = {"int4_sym": nncf.CompressWeightsMode.INT4_SYM, "int4_asym": nncf.CompressWeightsMode.INT4_ASYM,
            "int4_channel": nncf.CompressWeightsMode.INT4_SYM}
    return {
        "mode": mode[weight_format], "group_size": -1 if weight_format == "int4_channel" else 128,
        "ratio": 1.0, "all_layers": True,
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
                        checkpoint: Checkpoint = _nothing, merge_sizes: Optional[Collection[int]] = None,
                        nncf_overrides: Optional[dict] = None) -> None:
    """Write src's model (the GGUF reader's IR) compressed to `weight_format` into dst, its
    weights unpacked to f16 in memory only: the same model as fold_to_f16 then compress,
    without writing the f16 folder (3 GB for a 1.5B main) and reading it back. `merge_sizes`:
    which groups of projections to merge (fuse_projections), `nncf_overrides`: arguments of
    nncf.compress_weights in place of the format's (experiments compare them)."""
    import openvino as ov

    if weight_format not in COMPRESSED:
        raise ValueError(f"{weight_format!r} is not one of {COMPRESSED}")
    model = ov.Core().read_model(src / "openvino_model.xml")
    fold_packed_weights(model, progress, checkpoint)
    _compress_model(model, src, dst, weight_format, checkpoint, merge_sizes, nncf_overrides)


def _compress_model(model, src: Path, dst: Path, weight_format: str, checkpoint: Checkpoint,
                    merge_sizes: Optional[Collection[int]] = None, nncf_overrides: Optional[dict] = None) -> None:
    import nncf

    options = {**_nncf_options(weight_format), **(nncf_overrides or {})}
    with _quiet_nncf():
        model = nncf.compress_weights(model, **options)
    # q/k/v and gate/up as one matmul each (the int4 formats: the same logits, fewer fixed costs a step).
    fuse_projections(model, merge_sizes)
    if options.get("group_size", -1) > 0:  # per channel (-1): the plugin's own activation groups
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
# race or a first load running beside them keeps the CPU first (19: the lowest there is,
# since a launch converts beside the first visitor's load and race).
CONVERSION_NICE = 19


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
