"""Calibrations made up for tests that need one saved or read, not measured: complete (every
field of demo.models.calibration_result.Calibration), with plausible constants."""

from pathlib import Path
from typing import Optional

from demo.models import calibration_store
from demo.models.calibration_result import Calibration, Candidate


def candidate(mode: str, main: str, draft: str, k: int, speculative_tok_s: float = 2.0,
              baseline_tok_s: float = 1.0) -> Candidate:
    return Candidate(main_format=main, draft_format=draft, mode=mode, k=k, tokens_per_step=2.0, step_s=0.1,
                     speculative_tok_s=speculative_tok_s, baseline_tok_s=baseline_tok_s, memory_bytes=1 << 30,
                     fits=True)


def made_up(choice: dict, *, fingerprint: Optional[dict] = None, preset: str = "made-up",
            candidates: Optional[list] = None, **fields) -> Calibration:
    """A calibration whose choice is {mode: (main format, draft format, K)}; `fields`
    replace what it says otherwise (e.g. main=, draft=, pipeline_overhead=)."""
    chosen = {mode: candidate(mode, *c) for mode, c in choice.items()}
    k_max = max([c.k for c in chosen.values()] + [1])
    mains = list(dict.fromkeys(c.main_format for c in chosen.values()))
    drafts = list(dict.fromkeys(c.draft_format for c in chosen.values()))
    data = {
        "calibration_version": calibration_store.CALIBRATION_VERSION, "preset": preset,
        "fingerprint": fingerprint or {"cpu": "made-up CPU", "isa_flags": ["avx2"], "cores": 2,
                                       "memory_bytes": 8 << 30, "openvino": "0", "models": {"main": "m", "draft": "d"}},
        "started_at": 0.0, "duration_s": 1.0, "others_busy": [None, None], "k_max": k_max, "plan": "full",
        "acceptance_from": None, "prompts": 1, "max_new_tokens": 16, "prefix_tokens": 100,
        "threads": {"fair": None, "race": 1}, "race_curve_measured_at": [1, 2], "cores": 2, "budget_bytes": 8 << 30,
        "main": {f: {"verify_s": {"fair": [0.05] * (k_max + 1), "race": [0.08] * (k_max + 1)},
                     "memory_bytes": 1 << 30, "dominated": False, "decode_step_s": 0.05} for f in mains},
        "draft": {f: {"step_s": {"fair": 0.01, "race": 0.015}, "memory_bytes": 1 << 28} for f in drafts},
        "agreement_runs": {f"{m}/{d}": [[2, 1, 0]] for m in mains for d in drafts},
        "pipeline_overhead": {},
        "candidates": candidates if candidates is not None else list(chosen.values()),
        "choice": chosen,
        "fastest_alone": {"main_format": mains[0] if mains else "gguf", "baseline_tok_s": 1.0},
        "skipped": [],
    }
    return Calibration.model_validate({**data, **fields})


def auto_fixture_presets(folder: Path, name: str):
    """The fixture preset with `format: auto`, as the embedded pair has it, under its own `name`
    (its calibration file must not replace the real fixture's), written into `folder`."""
    import yaml

    from demo.models.presets import load_presets

    raw = yaml.safe_load(Path("models.yaml").read_text())
    entry = raw["presets"]["smollm2-self-draft"]
    main = dict(entry["main"], format="auto")
    raw = {"default": name, "presets": {name: {**entry, "main": main, "draft": dict(main)}}}
    (folder / "models.yaml").write_text(yaml.safe_dump(raw))
    return load_presets(folder / "models.yaml")


def saved(preset, store, choice: dict, **fields) -> Calibration:
    """made_up for `preset` on this machine, saved where demo.calibrate saves it."""
    fp = calibration_store.fingerprint(preset, store)
    result = made_up(choice, fingerprint=fp, preset=preset.name, **fields)
    path = calibration_store.cache_path(store, preset.name, fp)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(result.to_json())
    return result
