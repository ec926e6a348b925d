"""This machine's calibrations, as saved: where they live and how they are read back.

demo.calibrate measures a preset and writes its result here (a Calibration, whose JSON
form demo.models.calibration_result documents), keyed by the machine fingerprint (CPU, ISA
flags, cores, RAM, OpenVINO version) and the models' checksums. What reads it lives below
the engine: `format: auto` (demo.models.formats) resolves to the calibrated choice, and the
engine's front door reads the calibrated K and the prediction a race is explained with.
Cheap: a few small JSON files, no model is loaded.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Optional

from pydantic import ValidationError

from .calibration_result import Calibration

# Raised whenever what is measured, or how, changes: an older result is measured again.
# 6: the main alone measured per mode, the baseline the fastest; formats' quality.
# 7: race mode's real pipelines timed at once, as a race runs them (demo.calibrate.beside).
# 8: the activation precision measured (demo.calibrate.precision), the pipelines timed at it.
# 9: fair mode's main alone timed on the stateful backend too; the baseline may run it.
CALIBRATION_VERSION = 9


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
        result = read(path)
        if result is None or mode not in result.choice:
            continue
        fp = result.fingerprint.model_dump()
        if any(fp.get(k) != v for k, v in machine.items()):
            continue
        for which in ((role,) if role else ("main", "draft")):
            if result.fingerprint.models.get(which) == wanted:
                return result.choice[mode].format_of(which)
    return None


# What each calibration file held when it was last parsed, by path and content: a race asks the
# calibration many questions (formats, K, precision, attention, step costs, the page's words), and
# each file is validated once per content, not once per question, on a 2-core box where the race
# is running. Keyed by the bytes' digest, not the file's mtime: two writes within one clock tick
# of the file system, of the same size, would otherwise read as one version.
_PARSED: dict = {}
_PARSED_LOCK = threading.Lock()
_PARSED_KEPT = 64  # files remembered at most (a cache folder holds a handful)


def read(path: Path) -> Optional[Calibration]:
    """The calibration saved in `path`, or None: a damaged or foreign file (a stage file,
    another version's result) is ignored, never fatal. Validated once per content of the file."""
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    version = hashlib.blake2b(raw, digest_size=16).digest()
    with _PARSED_LOCK:
        kept = _PARSED.get(str(path))
    if kept is not None and kept[0] == version:
        return kept[1]
    result = parse(raw)
    with _PARSED_LOCK:
        _PARSED[str(path)] = (version, result)
        while len(_PARSED) > _PARSED_KEPT:
            _PARSED.pop(next(iter(_PARSED)))
    return result


def parse(raw: bytes) -> Optional[Calibration]:
    """A calibration file's bytes validated (read() keeps what this gives for each content)."""
    try:
        result = json.loads(raw)
        if not isinstance(result, dict) or result.get("calibration_version") != CALIBRATION_VERSION:
            return None  # an older calibration measured less (or differently): measure again
        return Calibration.model_validate(result)
    except (ValueError, ValidationError):
        return None


def _key(fp: dict) -> str:
    return hashlib.sha256(json.dumps(fp, sort_keys=True).encode()).hexdigest()[:12]


def cache_path(store, preset_name: str, fp: dict) -> Path:
    return store.cache_dir / "calibration" / f"{preset_name}-{_key(fp)}.json"


def stages_path(store, preset_name: str, fp: dict) -> Path:
    """Where an unfinished calibration keeps the stages it measured (demo.calibrate.stages)."""
    return store.cache_dir / "calibration" / f"{preset_name}-{_key(fp)}.stages.json"


def load_cached(store, preset) -> Optional[Calibration]:
    """This machine's calibration of `preset`, or None."""
    return read(cache_path(store, preset.name, fingerprint(preset, store)))


def calibrated_precision(store, preset) -> str:
    """The activation precision this machine's calibration of `preset` chose; f32 without one."""
    result = load_cached(store, preset) if preset.draft is not None else None
    return result.precision.choice if result is not None and result.precision is not None else "f32"


def calibrated_baseline_attention(store, preset, mode: str) -> str:
    """The attention backend ("PA" or "SDPA") the baseline of `mode` ("fair" or "race") runs
    on, as this machine's calibration of `preset` measured it fastest; PA without one."""
    result = load_cached(store, preset) if preset.draft is not None else None
    baseline = result.baseline.get("fair" if mode == "fair" else "race") if result is not None else None
    return baseline.attention if baseline is not None else "PA"


def step_costs(result: Optional[Calibration], main_format: Optional[str], draft_format: Optional[str], mode: str):
    """What one speculative step costs in `mode` ("race" or "fair") for these weight formats,
    from a calibration (load_cached): demo.core.acceptance.StepCosts, or None when the
    calibration did not measure them (no result, another format, a main format it skipped)."""
    from ..core.acceptance import StepCosts

    main = result.main.get(main_format) if result is not None else None
    draft = result.draft.get(draft_format) if result is not None else None
    if main is None or draft is None or mode not in main.verify_s or mode not in draft.step_s:
        return None
    overhead = result.pipeline_overhead.get(mode)  # none measured: none added
    return StepCosts(draft_s=draft.step_s[mode], verify_s=tuple(main.verify_s[mode]),
                     per_step_s=overhead.per_step_s if overhead else 0.0,
                     per_guess_s=overhead.per_guess_s if overhead else 0.0,
                     # the K its real pipeline was timed at keeps what it measured (cost_model.predict)
                     timed_extra_s=tuple(sorted((int(k), v) for k, v in overhead.extra_s.items())) if overhead else ())
