"""The engine's front door: presets + prepared models + pipelines + race, no UI.

    arena = Arena.create()
    for event in arena.run(RaceRequest(prompt="…")):
        ...  # ChunkEvent / DoneEvent / StatusEvent
    summary = arena.summarize(results, request)
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional, Union

from .errors import DemoError
from .metrics import SideStats, acceptance_rate, equality_verdict, side_stats, speedup
from .prepare import PreparedPair, prepare_preset
from .presets import PresetFile, load_presets
from .race import ChunkEvent, DoneEvent, StartEvent, race, sequential
from .settings import (
    MAX_PROMPT_CHARS, GenerationSettings, Mode, PipelineOptions, cpu_cores, race_threads,
)
from .sources import ModelStore
from .streaming import BASELINE, SPECULATIVE


@dataclass(frozen=True)
class StatusEvent:
    """Something slow is happening before tokens flow (preparing, loading, warming up)."""

    message: str


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


@dataclass(frozen=True)
class Summary:
    baseline: SideStats
    speculative: SideStats
    speedup: Optional[float]
    acceptance_rate: Optional[float]   # OpenVINO's accepted ÷ drafted (its count skips the final step)
    verdict: str
    how: str                           # how the race was run, in words
    errors: dict


def threads_for(request: RaceRequest) -> Optional[int]:
    """Threads per pipeline for a request (None: OpenVINO's default, all cores)."""
    if request.mode != "race":
        return None  # fair mode: each pipeline alone with the whole machine
    if request.race_threads is None:
        return race_threads()
    return request.race_threads or None


def how_it_ran(mode: Mode, options: PipelineOptions, method: str, threads: Optional[int]) -> str:
    cores = cpu_cores()
    devices = f"main on {options.main_device}"
    if method == "draft":
        devices += f", draft on {options.draft_device}"
    else:
        devices += ", prompt lookup (no draft)"
    precision = "exact mode (f32)" if options.exact else "default precision"
    if mode == "race" and threads is None:
        split = f"both pipelines at once, each with OpenVINO's default threads on all {cores} cores"
    elif mode == "race":
        split = (f"both pipelines at once, {threads} thread{'s' if threads != 1 else ''} each "
                 f"of {cores} core{'s' if cores != 1 else ''}, CPU pinning off")
    else:
        split = f"fair mode: each pipeline alone with all {cores} cores, then replayed side by side"
    return f"{split}; {devices}; {precision}"


class Arena:
    def __init__(self, presets: PresetFile, store: ModelStore, cache=None):
        from .pipelines import PipelineCache

        self.presets = presets
        self.store = store
        self.cache = cache or PipelineCache()
        self._prepared: dict[str, PreparedPair] = {}
        self._prepare_lock = threading.Lock()

    @classmethod
    def create(cls, models_yaml: Optional[Path] = None, cache_dir: Optional[Path] = None) -> "Arena":
        return cls(load_presets(models_yaml), ModelStore(cache_dir))

    def devices(self) -> list[str]:
        from .pipelines import available_devices

        return available_devices()

    def prepare(self, preset_name: Optional[str], status: Callable[[str], None] = lambda m: None) -> PreparedPair:
        preset = self.presets.get(preset_name)
        with self._prepare_lock:
            if preset.name not in self._prepared:
                def progress(stage: str, done: float, total: float) -> None:
                    status(f"{stage}: {100 * done / total:.0f}%" if total else f"{stage}…")

                self._prepared[preset.name] = prepare_preset(preset, self.store, progress)
            return self._prepared[preset.name]

    def runners(self, request: RaceRequest, status: Callable[[str], None] = lambda m: None) -> dict:
        pair = self.prepare(request.preset, status)
        options = request.options.with_threads(threads_for(request))
        return self.cache.get(pair.main, pair.draft, request.settings.method, options, status)

    def run(self, request: RaceRequest, stop: Optional[threading.Event] = None) -> Iterator[Union[StatusEvent, StartEvent, ChunkEvent, DoneEvent]]:
        """Validate, prepare and load (with StatusEvents), then race or run sequentially."""
        prompt = validate_prompt(request.prompt)
        settings = request.settings.validated()
        loaded: list = []
        for message in self.load_with_status(request, loaded):
            yield StatusEvent(message)
        stream = race if request.mode == "race" else sequential
        yield from stream(loaded[0], prompt, settings, stop)

    def load_with_status(self, request: RaceRequest, out: Optional[list] = None) -> Iterator[str]:
        """Prepare and load the request's pipelines, yielding status messages meanwhile.

        The runners are appended to `out`. Work happens in a helper thread so that a page
        can show each message as it comes instead of freezing.
        """
        yield from _status_stream(lambda status: self.runners(request, status), out if out is not None else [])

    def summarize(self, results: dict, request: RaceRequest) -> Summary:
        base, spec = results[BASELINE], results[SPECULATIVE]
        b = side_stats(base.chunks, base.start, base.end)
        s = side_stats(spec.chunks, spec.start, spec.end)
        threads = threads_for(request)
        return Summary(
            baseline=b,
            speculative=s,
            speedup=speedup(b, s) if not (base.error or spec.error) else None,
            acceptance_rate=acceptance_rate(spec.ov_accepted_tokens, spec.ov_draft_tokens),
            verdict=equality_verdict(base.token_ids, spec.token_ids),
            how=how_it_ran(request.mode, request.options, request.settings.method, threads),
            errors={side: r.error for side, r in results.items() if r.error},
        )


def validate_prompt(prompt: Optional[str]) -> str:
    if prompt is None or not prompt.strip():
        raise DemoError("The prompt is empty; type a question or pick an example.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise DemoError(
            f"The prompt is {len(prompt):,} characters long; the limit is {MAX_PROMPT_CHARS:,}, so shorten it."
        )
    return prompt


def _status_stream(work: Callable[[Callable[[str], None]], object], out: list) -> Iterator[str]:
    """Run `work(status)` in a thread and yield each status message as it is reported.

    The result is appended to `out`; an exception in `work` is re-raised here.
    """
    import queue

    q: "queue.Queue" = queue.Queue()
    done = object()
    box: dict = {}

    def target():
        try:
            box["result"] = work(q.put)
        except BaseException as e:  # re-raised in the consumer's thread below
            box["error"] = e
        finally:
            q.put(done)

    t = threading.Thread(target=target, name="arena-load", daemon=True)
    t.start()
    while (item := q.get()) is not done:
        yield item
    t.join()
    if "error" in box:
        raise box["error"]
    out.append(box["result"])
