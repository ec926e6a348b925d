"""What a finished race leaves behind: a row on the scoreboard and a recording.

Called by the page (and by `python -m demo.record`) once a race is over. Only a race that
really finished counts: every side done, none stopped, none failed. A scoreboard that
cannot be written never costs the visitor the race: the failure comes back as a warning
sentence next to the recording.

Engine code: no Gradio, no OpenVINO.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional

from ..core.errors import DemoError
from ..core.streaming import BASELINE, SPECULATIVE
from ..engine import three_way
from ..engine.arena import RaceRequest, validate_prompt
from ..engine.backend import Backend
from . import recording
from .scoreboard import Scoreboard, ScoreboardError, prompt_class, race_record


@dataclass(frozen=True)
class Outcome:
    recording: Optional[recording.Recording]
    rows: list            # scoreboard row ids written (empty when not recorded)
    warning: Optional[str]  # one sentence when the scoreboard (or the recording) failed


@functools.lru_cache(maxsize=1)
def machine() -> dict:
    """This machine: CPU model, ISA flags, cores (demo.core.machine.machine_info, read once)."""
    from ..core.machine import machine_info

    return machine_info()


@functools.lru_cache(maxsize=1)
def library_versions() -> dict:
    from ..core.machine import versions

    return versions()


def finished(results: dict, lanes) -> bool:
    return all(lane in results and not results[lane].error and not results[lane].cancelled for lane in lanes)


def classify(arena: Backend, request: RaceRequest, prompt: str) -> str:
    preset = arena.presets.get(request.preset)
    return prompt_class(prompt, preset.name, preset.examples, [("three-way", three_way.EXAMPLE_PROMPTS)])


def after_race(arena: Backend, request: RaceRequest, results: dict, how: str,
               scoreboard: Optional[Scoreboard], kind: str = "race") -> Optional[Outcome]:
    """Record a finished race (kind "race": baseline + speculative; "three-way": baseline,
    draft, lookup) on the scoreboard and as a recording; None if it did not finish."""
    lanes = recording.RACE_LANES if kind == "race" else recording.THREE_WAY_LANES
    if not finished(results, lanes):
        return None
    prompt = validate_prompt(request.prompt)  # lone surrogates shown as U+FFFD, as the race did
    preset = arena.presets.get(request.preset)
    klass = classify(arena, request, prompt)
    pair = arena.prepared(request)
    formats = dict(main_format=pair.main_format if pair else request.main_format,
                   draft_format=pair.draft_format if pair else request.draft_format)
    settings = request.settings
    mode = "three-way" if kind == "three-way" else request.mode
    warnings = []
    rows: list = []
    if scoreboard is not None:
        if kind == "race":
            pairs = [(settings.method, results[BASELINE], results[SPECULATIVE])]
        else:
            pairs = [(three_way.METHOD[lane], results["baseline"], results[lane]) for lane in ("draft", "lookup")]
        records = [race_record(preset=preset.name, method=method, mode=mode, prompt=prompt, prompt_class=klass,
                               baseline=base, speculative=spec, settings=settings, machine=machine(), **formats)
                   for method, base, spec in pairs]
        try:
            rows = scoreboard.record(records)
        except ScoreboardError as e:
            warnings.append(str(e))
    rec = None
    try:
        rec = recording.from_results(
            {lane: results[lane] for lane in lanes}, kind=kind, mode=mode, preset=preset.name,
            settings=settings, prompt=prompt, prompt_class=klass, how=how, exact=request.options.exact,
            machine=machine(), versions=library_versions(), **formats,
            baseline_format=pair.baseline_format if pair is not None and pair.baseline is not None else None)
        recording.dumps(rec)  # too big to replay: say so now, not when someone uploads it
    except DemoError as e:
        rec = None
        warnings.append(str(e))
    return Outcome(recording=rec, rows=rows, warning=" ".join(warnings) or None)
