"""Room for a prepare: free disk and free memory checked against what it will take, before
any download, export or conversion starts, so a prepare a visitor caused never fills the
disk or memory that everyone's races need.

What a model takes is estimated from what models.yaml declares: a pypi or gguf model's
file size (ModelStore.space_needed: each format made from it), an export's `parameters`.
A model without such a figure (a hub repository, an export that declares none) is not
checked here; a full disk during its prepare still gets ModelStore's sentence.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable, Optional

from ..core import memory
from ..core.errors import DemoError
from .presets import ExportSource, GgufSource, Preset, PypiSource
from .sources import ModelStore

# Bytes a parameter takes in an exported IR, per optimum-intel weight format.
IR_BYTES_PER_PARAMETER = {"fp32": 4.0, "fp16": 2.0, "int8": 1.0, "int4": 0.6}
DOWNLOAD_BYTES_PER_PARAMETER = 2.0  # Hub checkpoints are mostly f16/bf16
# optimum loads the PyTorch model in f32 to trace and convert it.
EXPORT_RAM_BYTES_PER_PARAMETER = 4.0
HEADROOM = 1.1  # estimates, not measurements: ask for a tenth more


def free_disk_bytes(folder: Path) -> int:
    """Free bytes on the filesystem that holds `folder` (or would: its nearest existing parent)."""
    return shutil.disk_usage(_existing(folder)).free


def free_ram_bytes() -> int:
    return memory.available_bytes()


def needs(preset: Preset, store: ModelStore, main_format: Optional[str] = None,
          draft_format: Optional[str] = None) -> tuple[dict, int]:
    """({folder: bytes of disk}, bytes of memory) that preparing what is not ready yet takes.
    Main and draft are prepared at the same time (demo.models.prepare), so their needs add up."""
    disk: dict[Path, int] = {}
    ram = 0
    specs = [(preset.main, main_format)]
    if preset.draft is not None and preset.draft != preset.main:
        specs.append((preset.draft, draft_format))
    for spec, fmt in specs:
        if isinstance(spec, (PypiSource, GgufSource)):
            fmt = store.resolve_format(spec, fmt)
            if store.is_ready(spec, fmt):
                continue
            _add(disk, store.cache_dir, store.space_needed(spec, fmt) or 0)
        elif isinstance(spec, ExportSource) and spec.parameters and not store.is_ready(spec):
            if not spec.repo.startswith("/"):  # a Hub id: the PyTorch checkpoint is downloaded first
                _add(disk, _hub_cache(), int(spec.parameters * DOWNLOAD_BYTES_PER_PARAMETER))
            _add(disk, store.cache_dir, int(spec.parameters * IR_BYTES_PER_PARAMETER[spec.weight_format]))
            ram += int(spec.parameters * EXPORT_RAM_BYTES_PER_PARAMETER)
    return disk, ram


def check_room(preset: Preset, store: ModelStore, main_format: Optional[str] = None,
               draft_format: Optional[str] = None, free_disk: Callable[[Path], int] = None,
               free_ram: Callable[[], int] = None) -> None:
    """Refuse, with a sentence that says how much is needed and how much is free, a prepare
    that would not fit on its disk or in memory (`free_disk` / `free_ram`: the probes)."""
    free_disk = free_disk or free_disk_bytes
    free_ram = free_ram or free_ram_bytes
    disk, ram = needs(preset, store, main_format, draft_format)
    by_device: dict = {}
    for folder, n in disk.items():
        device = os.stat(_existing(folder)).st_dev  # two folders on one filesystem share its free space
        by_device.setdefault(device, [folder, 0])[1] += n
    for folder, n in by_device.values():
        need, free = int(n * HEADROOM), free_disk(folder)
        if need > free:
            raise DemoError(f"Preparing the preset {preset.name!r} needs about {_size(need)} of free disk and "
                            f"only {_size(free)} is free; choose another preset, or ask the operator to free space.")
    need, free = int(ram * HEADROOM), free_ram() if ram else 0
    if ram and need > free:
        raise DemoError(f"Preparing the preset {preset.name!r} needs about {_size(need)} of free memory and only "
                        f"{_size(free)} is free; choose another preset, or ask the operator to prepare it "
                        "on a bigger machine.")


def _add(disk: dict, folder: Path, n: int) -> None:
    if n:
        disk[folder] = disk.get(folder, 0) + n


def _hub_cache() -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def _existing(folder: Path) -> Path:
    folder = Path(folder).expanduser().absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def _size(n: int) -> str:
    return f"{n / (1 << 30):.1f} GB" if n >= 1 << 30 else f"{max(1, round(n / (1 << 20)))} MB"
