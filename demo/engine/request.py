"""What a visitor asks for (RaceRequest), its first check, and how a finished race is
summed up and described in words (Summary, how_it_ran, weights_note)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Optional

from ..core import placement
from ..core.errors import DemoError
from ..core.explain import Explanation
from ..core.metrics import Comparison, SideStats
from ..core.settings import FREE_DRAFT, MAX_PROMPT_CHARS, GenerationSettings, Mode, PipelineOptions, cpu_cores

if TYPE_CHECKING:  # annotations only
    from ..models.prepare import PreparedPair


@dataclass(frozen=True)
class RaceRequest:
    prompt: str
    preset: Optional[str] = None  # None = the default preset
    settings: GenerationSettings = field(default_factory=GenerationSettings)
    options: PipelineOptions = field(default_factory=PipelineOptions)
    mode: Mode = "race"
    # Threads per pipeline while racing: None = split the cores evenly (the default),
    # 0 = OpenVINO's own default (every pipeline uses every core). For measurements.
    race_threads: Optional[int] = None
    # Weight formats (demo/models/formats.py) for pypi/gguf models; None = what models.yaml says
    # (`auto`: this machine's calibrated choice). Both sides always use the same main weights.
    main_format: Optional[str] = None
    draft_format: Optional[str] = None

    def __post_init__(self):
        # The one place a mode is checked: everything downstream reads request.mode as it is.
        if self.mode not in ("race", "fair"):
            raise DemoError(f"The mode {self.mode!r} is neither race nor fair; choose one of the two.")


@dataclass(frozen=True)
class Summary:
    baseline: SideStats
    speculative: SideStats
    speedup: Optional[float]
    acceptance_rate: Optional[float]   # OpenVINO's accepted ÷ drafted (demo.core.metrics)
    verdict: str
    how: str                           # how the race was run, in words
    errors: dict
    why: Optional[Explanation] = None  # "Why this speedup?" (speculative runs that finished)
    weights: Optional[str] = None      # one line when the two sides read different main weights
    ov_accepted: Optional[int] = None  # the counts behind acceptance_rate
    ov_drafted: Optional[int] = None
    counted_by: str = "OpenVINO's count, which leaves out the last step"  # whose counts those are
    sources: Optional[str] = None      # the own loop's guesses by drafter, in words
    baseline_note: Optional[str] = None  # one sentence when the baseline is not this machine's fastest alone

    @classmethod
    def of(cls, c: Comparison, how: str, errors: dict,
           why: Optional[Callable[[Comparison], Explanation]] = None, weights: Optional[str] = None,
           guess_sources: Optional[dict] = None, baseline_note: Optional[str] = None) -> "Summary":
        """The page's summary of a comparison (metrics.compare); `why` only for a race that finished;
        `guess_sources` (RunResult.guess_sources) when the own verify loop ran the speculative side."""
        own = guess_sources is not None
        return cls(baseline=c.baseline, speculative=c.speculative, speedup=c.speedup, acceptance_rate=c.acceptance_rate,
                   verdict=c.verdict, how=how, errors=errors, why=None if c.failed or why is None else why(c),
                   weights=weights, ov_accepted=c.ov_accepted, ov_drafted=c.ov_drafted,
                   counted_by="the own loop's count, padding guesses included" if own else cls.counted_by,
                   sources=sources_words(guess_sources) if own else None, baseline_note=baseline_note)


# The own verify loop's drafters (engine/verify_loop/interfaces.py), as the summary and the step view name them.
SOURCE_NAMES = {"prompt": "the prompt and answer", "datastore": "the datastore of code",
                "recycled": "the main model's earlier predictions"}


def sources_words(sources: dict) -> str:
    """'guesses from: the prompt and answer 12 steps (18 of 25 kept), …' (RunResult.guess_sources)."""
    names = SOURCE_NAMES
    if not sources:
        return "no step drafted: on this answer the gate found no guess that would pay on this machine"
    parts = [f"{names.get(src, src)} {steps} step{'s' if steps != 1 else ''} ({kept} of {verified} kept)"
             for src, (steps, verified, kept) in sorted(sources.items(), key=lambda kv: -kv[1][0])]
    return "guesses from " + ", ".join(parts)


def threads_for(request: RaceRequest) -> Optional[int]:
    """Threads per pipeline for a request (None: OpenVINO's default, all cores)."""
    if request.mode != "race":
        return None  # fair mode: each pipeline alone with the whole machine
    if request.race_threads is None:
        # The cores are split among the sides that compute on the CPU (a GPU or NPU side takes none).
        return placement.split_threads(cpu_cores(), request.options, request.settings.method)
    return request.race_threads or None


def how_it_ran(mode: Mode, options: PipelineOptions, method: str, threads: Optional[int],
               in_turn: bool = False) -> str:
    cores = cpu_cores()
    devices = f"main on {options.main_device}"
    if method == "eagle3":
        devices += f", EAGLE-3 head on {options.draft_device}"
    elif method == "draft":
        devices += f", draft on {options.draft_device}"
    elif method == FREE_DRAFT:
        devices += (", free drafting (no draft model: n-grams of the prompt and answer, the main model's own earlier "
                    "predictions, and a datastore of installed Python code where `python -m demo.prepare --datastore` "
                    "built one), verified by the arena's own loop on OpenVINO Runtime over the main model's stateful "
                    "IR, not an OpenVINO GenAI pipeline")
    else:
        devices += ", prompt lookup (no draft)"
    # From the very properties the constructors are given, with the threads really used.
    precision = placement.describe_built_with(options.with_threads(threads), method)
    if method == FREE_DRAFT:
        scheduler = ("the speculative side stateful (the own loop, no scheduler, no prefix cache), the baseline "
                     + ("stateful too (SDPA)" if placement.baseline_stateful(options, method) else
                        f"with {placement.scheduler_settings(options).describe()}"))
    elif placement.stateful(options, method):
        scheduler = "stateful pipelines on both sides (no scheduler, no prefix cache)"
    elif placement.baseline_stateful(options, method):
        scheduler = (f"the baseline stateful (SDPA, no scheduler, no prefix cache), the speculative side with "
                     f"{placement.scheduler_settings(options).describe()}")
    else:
        scheduler = placement.scheduler_settings(options).describe()
    extra = "".join(f"; {note}" for note in placement.notes(options, method))
    lanes = placement.cpu_lanes(options, method)
    if mode == "race" and lanes == 0:
        split = "both pipelines at once, neither on the CPU"
    elif mode == "race" and threads is None:
        split = f"both pipelines at once, each with OpenVINO's default threads on all {cores} cores"
    elif mode == "race":
        split = (f"both pipelines at once, {threads} thread{'s' if threads != 1 else ''} "
                 f"{'each ' if lanes > 1 else 'for the one side on the CPU, '}"
                 f"of {cores} core{'s' if cores != 1 else ''}, CPU pinning off")
    else:
        split = f"fair mode: each pipeline alone with all {cores} cores, then replayed side by side"
        if in_turn:
            split += " (loaded one at a time: both do not fit in memory together)"
    return f"{split}; {devices}; {precision}; {scheduler}{extra}"


def side_configs(formats: dict, options: PipelineOptions, method: str, k: Optional[int],
                 threshold: Optional[float] = None) -> dict:
    """What each side ran, one short phrase per side (the CLI's summary): the weights each
    reads (`formats`: "main", "draft", and "baseline" where the baseline reads its own main),
    the attention backend, the threads and, for the speculative side, the guesses a step."""
    threads = (f"OpenVINO's default threads ({cpu_cores()} cores)" if options.threads is None
               else f"{options.threads} thread{'s' if options.threads != 1 else ''}")
    spec_backend = "stateful (SDPA)" if placement.stateful(options, method) or method == FREE_DRAFT else "paged attention"
    base_backend = "stateful (SDPA)" if placement.baseline_stateful(options, method) else "paged attention"
    guesses = (f"drafting until less sure than {threshold}" if threshold is not None
               else f"K={k}" if k is not None else "")
    helper = {"draft": f" + draft {formats.get('draft')}", "eagle3": f" + EAGLE-3 head {formats.get('draft')}",
              "prompt_lookup": " + prompt lookup", FREE_DRAFT: " + free drafting"}.get(method, "")
    base_main = formats.get("baseline") or formats.get("main")
    return {"baseline": f"main {base_main}, {base_backend}, {threads}",
            "speculative": f"main {formats.get('main')}{helper}, {', '.join(filter(None, [guesses, spec_backend, threads]))}"}


def validate_prompt(prompt: Optional[str]) -> str:
    if prompt is None or not prompt.strip():
        raise DemoError("The prompt is empty; type a question or pick an example.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise DemoError(
            f"The prompt is {len(prompt):,} characters long; the limit is {MAX_PROMPT_CHARS:,}, so shorten it."
        )
    # A lone surrogate (an API call can send "\ud800") is not text: the tokenizer's UTF-8
    # conversion fails on it. Show it as U+FFFD, as a browser would, and run.
    return _LONE_SURROGATE.sub("\ufffd", prompt)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def weights_note(pair: "PreparedPair", mode: str) -> str:
    """One line for a race whose two sides read different main weights."""
    return (f"The baseline runs the main model as {pair.baseline_format}, this machine's fastest without a draft "
            f"in {mode} mode, and the speculative side as {pair.main_format} (faster with its draft): different "
            "weights, so their texts may differ (exact mode runs one main on both sides).")
