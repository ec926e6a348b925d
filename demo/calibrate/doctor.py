"""Which weight formats and thread counts OpenVINO runs on this CPU, for one preset.

Each format × thread count of the main and draft models is compiled and run (a 100-token
prefill, then a few decoding steps) in a child process, so a crash in OpenVINO's native code
(SIGFPE, SIGSEGV) or a hang is reported here instead of taking anything down. The results
go to this machine's safety record (demo.engine.native_guard), which the app and calibration read: a
configuration that crashes is never used. The command line is demo.doctor
(`python -m demo.doctor`).
"""

from __future__ import annotations

from typing import Optional

from ..core.errors import DemoError
from ..engine.native_guard import CRASHES, TOO_SLOW, WORKS, NativeConfig, NativeGuard, SafetyRecord

LABELS = {WORKS: "works", CRASHES: "crashes", TOO_SLOW: "too slow"}


def thread_counts(text: str, cores: int) -> list[Optional[int]]:
    out: list[Optional[int]] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if part == "default":
            out.append(None)
        elif part.isdigit() and 1 <= int(part) <= cores:
            out.append(int(part))
        else:
            raise DemoError(f"Thread counts must be 1 to {cores} or 'default', separated by commas (got {part!r}).")
    if not out:
        raise DemoError("Give at least one thread count, e.g. --threads 1,2,default.")
    return list(dict.fromkeys(out))


def diagnose(preset, store, formats: list[str], threads: list[Optional[int]], prepare: bool = False,
             report=lambda m: None, guard: Optional[NativeGuard] = None) -> list[dict]:
    """One row per role × format × thread count: status, ms per token, the sentence."""
    from ..models.formats import FORMATS

    guard = guard or NativeGuard(SafetyRecord(store.cache_dir))
    rows = []
    for role, spec in (("main", preset.main), ("draft", preset.draft)):
        if spec is None:
            continue
        for fmt in formats if _has_formats(spec) else [None]:
            if fmt is not None and fmt not in FORMATS:
                raise DemoError(f"Unknown format {fmt!r}; choose from {', '.join(FORMATS)}.")
            folder = store.ready_path(spec, fmt)
            if folder is None and prepare:
                report(f"preparing the {role} model as {fmt}")
                folder = store.prepare(spec, f"{role} model", weight_format=fmt).path
            for n in threads:
                row = {"role": role, "format": fmt or "as prepared", "threads": n}
                if folder is None:
                    rows.append({**row, "status": "not prepared", "ms_per_token": None,
                                 "detail": f"run with --prepare, or python -m demo.prepare --preset {preset.name}"})
                    continue
                config = NativeConfig(str(folder), role, n)
                try:
                    entry = guard.prove(config, report, None)  # afresh: an earlier verdict is replaced
                except DemoError as e:  # not proven (a timeout, a Python error in the child): nothing recorded
                    entry = {"status": "not proven", "detail": str(e)}
                rows.append({**row, "status": entry["status"], "ms_per_token": entry.get("ms_per_token"),
                             "detail": entry["detail"]})
    return rows


def _has_formats(spec) -> bool:
    from ..models.sources import has_formats

    return has_formats(spec)


def table(rows: list[dict]) -> str:
    lines = [f"{'model':<6} {'format':<12} {'threads':<8} {'result':<13} {'ms/token':>8}"]
    for r in rows:
        ms = f"{r['ms_per_token']:.0f}" if r.get("ms_per_token") else "–"
        threads = "default" if r["threads"] is None else str(r["threads"])
        lines.append(f"{r['role']:<6} {r['format']:<12} {threads:<8} {LABELS.get(r['status'], r['status']):<13} {ms:>8}")
    crashed = [r["detail"] for r in rows if r["status"] == CRASHES]
    return "\n".join(lines + [""] + crashed if crashed else lines)
