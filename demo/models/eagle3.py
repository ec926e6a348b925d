"""EAGLE-3 draft heads: what makes an IR folder one, read without OpenVINO.

An EAGLE-3 head is one decoder layer that drafts from three of the main model's hidden
states (early, middle, late layers) instead of from tokens alone; OpenVINO GenAI 2026.0+ runs
it through the same `draft_model(path, device)` call as a classic draft. The pipeline tells
the two apart by the head IR's runtime info, which optimum-intel's export writes:
`eagle3_mode` = True (optimum-intel's convert.py), and `hidden_layers_list`, the main model's
three layers to read (optimum does NOT write it; without it GenAI picks 2, n/2 and n-3 of the
main's n layers from the main's config.json, and refuses a main of fewer than 10 layers).
GenAI then finds those layers in the main IR by node names containing `layers.N/`, as
optimum-intel's export names them; an IR made by GenAI's own GGUF reader names nodes
otherwise (`model.layers.self_attn.add1.layer0`), so an EAGLE-3 main must be an optimum export.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..core.errors import DemoError

EAGLE3_MODE = "eagle3_mode"
HIDDEN_LAYERS = "hidden_layers_list"
MODEL_XML = "openvino_model.xml"


@dataclass(frozen=True)
class HeadInfo:
    """What an EAGLE-3 head IR says about itself."""

    hidden_layers: Optional[tuple[int, ...]]  # None: GenAI derives them from the main's config.json


def _rt_info(xml: Path) -> dict[str, str]:
    """The top-level <rt_info> entries of an IR's .xml (name -> value), read as text: the
    section comes after the layers, so only the file's tail is parsed, never the weights."""
    try:
        with open(xml, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - (1 << 20)))  # rt_info (tokenizer templates included) fits in a MiB
            tail = f.read().decode("utf-8", errors="replace")
    except OSError:
        return {}
    start = tail.rfind("<rt_info>")
    if start < 0:
        return {}
    section = tail[start:]
    return dict(re.findall(r'<(\w+) value="([^"]*)"\s*/>', section))


def head_info(folder: Path | str) -> Optional[HeadInfo]:
    """The folder's EAGLE-3 facts, or None when its IR is not an EAGLE-3 head."""
    info = _rt_info(Path(folder) / MODEL_XML)
    if info.get(EAGLE3_MODE, "").strip().lower() not in ("true", "1", "yes"):
        return None
    raw = info.get(HIDDEN_LAYERS)
    layers = tuple(int(x) for x in re.findall(r"-?\d+", raw)) if raw else None
    return HeadInfo(hidden_layers=layers or None)


def is_head(folder: Path | str) -> bool:
    return head_info(folder) is not None


def require_head(folder: Path | str, role: str = "EAGLE-3 head") -> HeadInfo:
    """The head's facts, or one sentence saying why this folder cannot be used as one."""
    folder = Path(folder)
    if not (folder / MODEL_XML).is_file():
        raise DemoError(f"The {role} folder {folder.name} has no {MODEL_XML}; export the head with optimum-intel "
                        "(optimum-cli export openvino --model HEAD_REPO OUT_DIR).")
    info = head_info(folder)
    if info is None:
        raise DemoError(f"The {role} in {folder.name} is not an EAGLE-3 head (its IR has no eagle3_mode runtime "
                        "info); export an EAGLE-3 checkpoint with optimum-intel, or choose the draft method.")
    if info.hidden_layers is not None and len(info.hidden_layers) != 3:
        raise DemoError(f"The {role} in {folder.name} names {len(info.hidden_layers)} hidden layers of the main "
                        "model; EAGLE-3 reads exactly three.")
    return info


def mark_head(folder: Path | str, hidden_layers: tuple[int, int, int]) -> None:
    """Write `hidden_layers_list` (and `eagle3_mode`) into a head IR, as GenAI reads them;
    optimum-intel writes only the mode. Rewrites the folder's openvino_model.xml/.bin."""
    import openvino as ov

    folder = Path(folder)
    core = ov.Core()
    model = core.read_model(folder / MODEL_XML)
    model.set_rt_info("True", EAGLE3_MODE)
    model.set_rt_info(" ".join(str(i) for i in hidden_layers), HIDDEN_LAYERS)
    tmp = folder / "openvino_model.tmp.xml"
    ov.save_model(model, tmp, compress_to_fp16=False)  # the weights keep the precision they have
    del model
    tmp.replace(folder / MODEL_XML)
    tmp.with_suffix(".bin").replace(folder / "openvino_model.bin")


# The architectures optimum-intel's export recognises as an EAGLE-3 head: only for these does it
# point the model classes at its own code (optimum/exporters/openvino/__main__.py).
EAGLE3_ARCHITECTURES = ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM")
# auto_map entries optimum replaces with its own classes; any other (a config or tokenizer
# class) would run the checkpoint's code under --trust-remote-code.
REPLACED_AUTO_MAP = {"AutoModel", "AutoModelForCausalLM"}


def checkpoint_config(checkpoint: Path) -> dict:
    """The checkpoint's config.json, or one sentence why optimum-intel's EAGLE-3 export cannot
    (or must not) take it."""
    import json

    try:
        config = json.loads((checkpoint / "config.json").read_text())
    except (OSError, ValueError):
        raise DemoError(f"The EAGLE-3 checkpoint {checkpoint.name} has no readable config.json; point the preset at "
                        "a head in AngelSlim's layout (config.json and model.safetensors).") from None
    archs = config.get("architectures") or ["none"]
    if archs[0] not in EAGLE3_ARCHITECTURES:
        raise DemoError(f"The checkpoint {checkpoint.name} is not an EAGLE-3 head (its config.json names {archs[0]}, "
                        f"not {' or '.join(EAGLE3_ARCHITECTURES)}); drop eagle3: true or choose a head.")
    foreign = set(config.get("auto_map") or {}) - REPLACED_AUTO_MAP
    if foreign:
        raise DemoError(f"The EAGLE-3 checkpoint {checkpoint.name} asks to run its own code ({', '.join(sorted(foreign))} "
                        "in auto_map), which this demo does not allow; use a head without custom code.")
    return config
