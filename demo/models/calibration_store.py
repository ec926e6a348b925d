"""This machine's calibrations, as saved: where they live and how they are read back.

demo.calibrate measures a preset and writes its result here, keyed by the machine
fingerprint (CPU, ISA flags, cores, RAM, OpenVINO version) and the models' checksums. What
reads it lives below the engine: `format: auto` (demo.models.formats) resolves to the
calibrated choice, and the engine's front door reads the calibrated K and the prediction a
race is explained with. Cheap: a few small JSON files, no model is loaded.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Optional

# 2: acceptance per format pair from greedy answers; interleaved timing. 3: a real
# pipeline's overhead per step in every prediction; fair mode's memory is one main model.
# 4: K=1 timed in the real pipeline too (version 3 extrapolated it and read it 25 % slow).
CALIBRATION_VERSION = 4


def machine_fingerprint() -> tuple:
    """The machine part of the fingerprint (demo.core.machine)."""
    from ..core.machine import fingerprint

    return fingerprint()


def model_hash(spec) -> str:
    """A model's identity for calibration: its source and checksums, not the format asked for."""
    return hashlib.sha256(spec.model_dump_json(exclude_defaults=True, exclude={"format"}).encode()).hexdigest()[:16]


def fingerprint(preset, store) -> dict:
    """What the measurements depend on; a change in any of it means calibrating again."""
    fp = {k: list(v) if isinstance(v, tuple) else v for k, v in machine_fingerprint()}
    fp["models"] = {role: model_hash(spec) for role, spec in (("main", preset.main), ("draft", preset.draft))
                    if spec is not None}
    return fp


def calibrated_format(spec, store, mode: str = "race", role: Optional[str] = None) -> Optional[str]:
    """The weight format this machine's calibration chose for `spec` in `mode`, or None.

    `role` ("main" or "draft") says which model of a calibrated pair `spec` is; a model
    drafting for itself is both. What `format: auto` in models.yaml resolves to
    (demo.models.formats.resolve_auto_format).
    """
    machine = {k: list(v) if isinstance(v, tuple) else v for k, v in machine_fingerprint()}
    wanted = model_hash(spec)
    for path in sorted((store.cache_dir / "calibration").glob("*.json")):
        try:
            result = json.loads(path.read_text())
            if result.get("calibration_version") != CALIBRATION_VERSION:
                continue
            fp = result["fingerprint"]
            if any(fp.get(k) != v for k, v in machine.items()):
                continue
            for which in ((role,) if role else ("main", "draft")):
                if fp["models"].get(which) == wanted:
                    return result["choice"][mode][f"{which}_format"]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a damaged or foreign file is ignored, never fatal
    return None


def _key(fp: dict) -> str:
    return hashlib.sha256(json.dumps(fp, sort_keys=True).encode()).hexdigest()[:12]


def cache_path(store, preset_name: str, fp: dict) -> Path:
    return store.cache_dir / "calibration" / f"{preset_name}-{_key(fp)}.json"


def stages_path(store, preset_name: str, fp: dict) -> Path:
    """Where an unfinished calibration keeps the stages it measured (demo.calibrate.stages)."""
    return store.cache_dir / "calibration" / f"{preset_name}-{_key(fp)}.stages.json"


def load_cached(store, preset) -> Optional[dict]:
    """This machine's calibration of `preset`, or None."""
    try:
        path = cache_path(store, preset.name, fingerprint(preset, store))
        result = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    # An older calibration measured less (or differently): measure again rather than guess.
    return result if isinstance(result, dict) and result.get("calibration_version") == CALIBRATION_VERSION else None


def step_costs(result: Optional[dict], main_format: Optional[str], draft_format: Optional[str], mode: str):
    """What one speculative step costs in `mode` ("race" or "fair") for these weight formats,
    from a calibration result (load_cached): demo.core.acceptance.StepCosts, or None when the
    calibration did not measure them (no result, another format, a main format it skipped)."""
    from ..core.acceptance import StepCosts

    try:
        verify = result["main"][main_format]["verify_s"][mode]
        draft = result["draft"][draft_format]["step_s"][mode]
        overhead = (result.get("pipeline_overhead") or {}).get(mode) or {}
        return StepCosts(draft_s=float(draft), verify_s=tuple(float(v) for v in verify),
                         per_step_s=float(overhead.get("per_step_s", 0.0)),
                         per_guess_s=float(overhead.get("per_guess_s", 0.0)))
    except (TypeError, KeyError, ValueError):
        return None
