"""Where speculation stops paying under load on this machine: the load benchmark's crossover,
saved next to the calibration (demo.bench.load writes it, the page and the Serve replicas read it).

One small JSON file per preset in `<cache>/calibration/`, keyed like the calibration (machine
fingerprint and the models' checksums), so a new CPU, OpenVINO version or model is measured
again. Cheap to read: no model is loaded.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, ValidationError

from .calibration_store import cache_path, fingerprint

LOAD_VERSION = 1  # raised when what the load benchmark measures, or how, changes


class LoadRecord(BaseModel):
    """What the load benchmark found for one preset on this machine."""

    model_config = ConfigDict(extra="forbid")

    load_version: int = LOAD_VERSION
    preset: str
    fingerprint: dict
    assistant_tokens: int
    max_new_tokens: int
    concurrency: list[int]            # the N measured, ascending
    speedup: dict[str, float]         # str(N) -> median paired ratio of aggregate tok/s (speculative ÷ baseline)
    crossover: Optional[int]          # smallest N whose ratio is <= 1; None: speculation paid at every N measured
    measured_at: str

    def sentence(self) -> str:
        """What a visitor reads, in one sentence."""
        most = max(self.concurrency)
        if self.crossover is None:
            return (f"Under load, speculation still paid with {most} simultaneous requests on this machine "
                    f"(measured up to {most}).")
        if self.crossover == min(self.concurrency):
            return (f"Under load, speculation did not pay even with {self.crossover} request"
                    f"{'s' if self.crossover != 1 else ''} at a time on this machine.")
        return (f"Under load, speculation stops paying from {self.crossover} simultaneous requests on this "
                f"machine (aggregate tok/s, measured up to {most}).")


def crossover_of(speedup_by_n: dict[int, float]) -> Optional[int]:
    """The smallest N whose aggregate-throughput ratio is at most 1 (None if there is none)."""
    for n in sorted(speedup_by_n):
        if speedup_by_n[n] <= 1.0:
            return n
    return None


def path_for(store, preset_name: str, fp: dict) -> Path:
    return cache_path(store, preset_name, fp).with_suffix(".load.json")  # beside the calibration it goes with


def save(store, preset, assistant_tokens: int, max_new_tokens: int, speedup_by_n: dict[int, float]) -> LoadRecord:
    fp = fingerprint(preset, store)
    record = LoadRecord(preset=preset.name, fingerprint=fp, assistant_tokens=assistant_tokens,
                        max_new_tokens=max_new_tokens, concurrency=sorted(speedup_by_n),
                        speedup={str(n): round(r, 4) for n, r in sorted(speedup_by_n.items())},
                        crossover=crossover_of(speedup_by_n), measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    path = path_for(store, preset.name, fp)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record.model_dump(), indent=2))
    tmp.replace(path)  # readers never see half a file
    return record


def load(store, preset) -> Optional[LoadRecord]:
    """This machine's load record for `preset`, or None (never measured, or damaged: ignored)."""
    try:
        data = json.loads(path_for(store, preset.name, fingerprint(preset, store)).read_text())
        if not isinstance(data, dict) or data.get("load_version") != LOAD_VERSION:
            return None
        return LoadRecord.model_validate(data)
    except (OSError, ValueError, ValidationError):
        return None
