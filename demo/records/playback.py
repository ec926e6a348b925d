"""A recording played back: its lanes as RunResults for demo.engine.race.replay, the
verdict the page shows after it, the labels a menu shows, and the recordings that come
with the demo. The format itself, and reading files from outside, is recording.py's.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from .recording import RECORDINGS_DIR, Recording, RecordingError, load


def to_results(rec: Recording) -> dict:
    """lane -> RunResult with each step at its recorded offset (start = 0), for demo.engine.race.replay."""
    from ..core.streaming import BASELINE, SPECULATIVE, Chunk, RunResult

    out = {}
    for lane in rec.lanes:
        side = BASELINE if lane.name == "baseline" else SPECULATIVE
        chunks = [Chunk(side, tuple(s.token_ids), s.text, s.accepted_text, s.t) for s in lane.steps]
        out[lane.name] = RunResult(side, start=0.0, end=lane.seconds, chunks=chunks,
                                   ov_generated_tokens=lane.tokens, ov_accepted_tokens=lane.ov_accepted_tokens,
                                   ov_draft_tokens=lane.ov_draft_tokens)
    return out


def summarize(rec: Recording):
    """The verdict the page shows after the replay: demo.engine.arena.Summary for a race,
    demo.engine.three_way.ThreeWaySummary for a three-way race; `how` says where it was recorded."""
    results = to_results(rec)
    how = f"{rec.how} (recorded on {machine_label(rec)}, {date_label(rec)})" if rec.how else \
        f"recorded on {machine_label(rec)}, {date_label(rec)}"
    if rec.kind == "three-way":
        from ..engine.three_way import summarize as three_way_summary

        return three_way_summary(results, how)
    from ..core.metrics import compare
    from ..engine.arena import Summary

    return Summary.of(compare(results["baseline"], results["speculative"]), how=how, errors={})


def machine_label(rec: Recording) -> str:
    m = rec.machine
    cpu = m.cpu_model or "an unknown CPU"
    flags = [f for f in m.isa_flags if f.startswith(("avx512", "amx"))] or [f for f in m.isa_flags if f.startswith("avx")]
    extra = f", {' '.join(flags[:3])}" if flags else ""
    return f"{cpu} ({m.cores} core{'s' if m.cores != 1 else ''}{extra})"


def date_label(rec: Recording) -> str:
    try:
        return datetime.fromisoformat(rec.recorded_at).strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return rec.recorded_at


def title(rec: Recording) -> str:
    """One line for a menu: what raced, on which prompt."""
    prompt = " ".join(rec.prompt.split())
    if len(prompt) > 48:
        prompt = prompt[:47] + "…"
    what = "three-way" if rec.kind == "three-way" else (
        f"{rec.mode}, {'prompt lookup' if rec.settings.method == 'prompt_lookup' else 'draft model'}")
    return f"{rec.preset} · {what} · “{prompt}”"


def shipped(folder: Path = RECORDINGS_DIR) -> dict:
    """The recordings that come with the demo: file name -> Recording (invalid ones left out)."""
    out = {}
    for path in sorted(Path(folder).glob("*.json")) if Path(folder).is_dir() else []:
        try:
            out[path.name] = load(path)
        except RecordingError:
            continue
    return out
