"""Before the first visitor: prepare and load the default pair, then measure this machine once.

`Arena.start_background_warmup` runs `start_warmup` in a thread; progress goes to the
terminal (`report`) and to `arena.startup`, which the page polls. A Calibrator (made by
demo.calibrate.launch, which sits above the engine) does the measuring. The warm-up reaches
the arena only through WarmupHost, which the arena passes in (itself): this module never
imports demo.engine.arena, so the front door calls the warm-up and not the other way round.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Callable, ContextManager, Iterator, Optional, Protocol

from ..core.errors import DemoError
from ..models.calibration_result import Calibration, origin_words
from ..models.calibration_store import load_cached
from ..core import placement
from .request import RaceRequest, threads_for
from .native_guard import NativeConfig, NativeGuard  # noqa: F401  (NativeGuard: WarmupHost's annotation)
from .startup_progress import RECORD_FILE, StartupState  # noqa: F401  (StartupState: the page polls it)

if TYPE_CHECKING:  # annotations only
    from ..models.presets import PresetFile
    from ..models.sources import ModelStore
    from .admission import Admission
    from .pipelines import PipelineCache


class Calibrator(Protocol):
    """Measures this machine once for a preset, for the warm-up (start_background_warmup).

    The engine only calls it; demo.calibrate.launch.LaunchCalibrator implements it and the
    app hands it in, so the engine never imports the calibration that runs above it.
    """

    def convert_early(self, preset, store, report: Callable[[str], None], stop: threading.Event,
                      on_ready: Callable[[str, Path], None] = lambda role, folder: None) -> None:
        """Start converting what the calibration will measure as soon as each model's own IR
        is on disk, beside the pair's load and the calibration's own prepare (low priority);
        `on_ready(role, folder)` as each format lands."""

    def prepare_candidates(self, preset, store, report: Callable[[str], None]) -> None:
        """Convert the weight formats the calibration will measure (no quiet machine needed)."""

    def calibrate(self, preset, store, report: Callable[[str], None],
                  slot: Callable[[str], ContextManager], race_pair: Optional[Callable[..., dict]] = None) -> Calibration:
        """Measure and save the choice (demo.models.calibration_store); `slot(what)` is
        entered around each measuring stage; `race_pair(main, draft, baseline_main, threads)`
        loads the engine's own race pipelines of those folders, for race mode to be timed on
        (they stay loaded: the chosen pair is warm when the launch says Ready)."""

    def summary_lines(self, result: Calibration, cache_dir: Path) -> list[str]:
        """The result in a few lines for the terminal (`cache_dir`: where it is kept)."""


class WarmupHost(Protocol):
    """What the warm-up uses of the engine's front door (demo.engine.arena.Arena passes itself)."""

    presets: "PresetFile"
    store: "ModelStore"
    admission: "Admission"    # each measuring stage takes the CPU in its own slot
    startup: StartupState     # the warm-up's progress, for the page's status line
    guard: "NativeGuard"      # proves each model on this CPU as soon as its folder is on disk
    cache: "PipelineCache"    # the loaded pipelines: calibration's race timing leaves its pair here

    def formats_for(self, request: RaceRequest) -> dict:
        """The weight formats the request runs on (where its folders will be)."""

    def load_with_status(self, request: RaceRequest, out: Optional[list] = None,
                         stages: Optional[Callable[[str], None]] = None) -> Iterator[str]:
        """Prepare and load the request's pipelines, yielding status messages."""

    def forget_prepared(self, preset_name: str) -> None:
        """Look the preset's folders up again (calibration changed what `auto` means)."""


def start_warmup(arena: WarmupHost, report: Callable[[str], None],
                 calibrator: Optional[Calibrator]) -> threading.Thread:
    """Prepare and load the default pair in a thread; with a `calibrator`, then calibrate
    once (unless this machine has a result) and load the chosen formats before Ready."""
    request = RaceRequest(prompt="warm-up", preset=arena.presets.default)
    preset = arena.presets.get(request.preset)
    give_up = threading.Event()  # the pair failed to prepare: the early conversion stops waiting
    # Held by each measuring stage and by each background check of a converted format: a check
    # (a model loaded and run in a child) never shares the CPU with a stage that times the machine.
    quiet = threading.Lock()
    if calibrator is not None and needs_calibration(arena, preset):
        threading.Thread(target=_convert_early, args=(arena, calibrator, preset, report, give_up, request, quiet),
                         name="startup-early-conversion", daemon=True).start()

    def task(message: str) -> None:  # main and draft prepare side by side: a row each on the page
        arena.startup.task(message)
        report(message)

    if placement.kind(request.options.main_device) == "CPU":
        for role in ("main", "draft") if preset.draft is not None else ("main",):
            threading.Thread(target=_check_early, args=(arena, request, role, task, give_up),
                             name=f"startup-check-{role}", daemon=True).start()

    def load() -> None:
        for message in arena.load_with_status(request, stages=task):
            arena.startup.update("preparing", message)
            report(message)

    def body():
        arena.startup.update("preparing", "preparing the default model pair")
        try:
            _remember_durations(arena, preset)
            load()
            arena.startup.mark_warm()
            if calibrator is not None and _calibrate_once(arena, request, report, calibrator, quiet):
                # The calibrated formats may differ from what loaded before: load them now, so
                # the first visitor does not wait for it (the pipeline cache evicts the earlier
                # pair when both do not fit its memory budget).
                load()
        except DemoError as e:
            give_up.set()
            arena.startup.update("failed", str(e))
            report(f"error: {e}")
            return
        except Exception as e:  # a bug must not leave the page saying "preparing" forever
            give_up.set()
            arena.startup.update("failed", "Preparing the models failed unexpectedly; the operator finds the "
                                           "details in the terminal and restarts the app.")
            report(f"error: {e!r}")
            raise
        arena.startup.update("ready", f"Ready{_origin_note(arena, preset)}. Type a prompt and press Run.")
        report("ready")

    t = threading.Thread(target=body, name="startup-warmup", daemon=True)
    t.start()
    return t


def _origin_note(arena: WarmupHost, preset) -> str:
    """Where this machine's choices come from, for the Ready line: " (…)" or nothing uncalibrated."""
    result = load_cached(arena.store, preset) if preset.draft is not None else None
    if result is None:
        return ""
    return f" ({origin_words(result.origin, short=True)})"


def _remember_durations(arena: WarmupHost, preset) -> None:
    """Estimate each step from how long it took at an earlier launch on this machine (per CPU
    fingerprint and preset, in the cache folder)."""
    from ..core.machine import fingerprint

    key = f"{preset.name} {hashlib.sha256(repr(fingerprint()).encode()).hexdigest()[:12]}"
    arena.startup.remember_in(arena.store.cache_dir / RECORD_FILE, key)


def _check_early(arena: WarmupHost, request: RaceRequest, role: str, task: Callable[[str], None],
                 stop: threading.Event) -> None:
    """Prove a model's native configuration (demo.engine.native_guard) as soon as its folder is on
    disk, beside the other model's preparation: the load then finds the verdict, or waits for
    this check instead of starting its own after both models are ready."""
    preset = arena.presets.get(request.preset)
    spec, wanted = (preset.main, "main_format") if role == "main" else (preset.draft, "draft_format")
    try:
        while (folder := arena.store.ready_path(spec, arena.formats_for(request)[wanted])) is None:
            if stop.wait(1.0):
                return
    except DemoError:  # the pair's own prepare says what is wrong
        return
    said: list = []

    def status(message: str) -> None:
        said.append(message)
        task(message)

    arena.guard.check_all([NativeConfig(str(folder), role, threads_for(request))], status)
    if said:
        task(f"{said[0]}: 100%")  # its row on the page, and its duration in the log


def _convert_early(arena: WarmupHost, calibrator: Calibrator, preset, report: Callable[[str], None],
                   stop: threading.Event, request: Optional[RaceRequest] = None,
                   quiet: Optional[threading.Lock] = None) -> None:
    # From the moment each model's own IR is on disk, beside the pair's native check, load
    # and warm-up: the conversion child is background work (demo.core.isolation.lower_priority,
    # its session niced too), so it takes only the core those leave idle, and the calibration
    # that waits for it starts sooner (BENCHMARKS.md, issue 32).
    try:
        calibrator.convert_early(preset, arena.store, lambda m: report(f"calibrating: {m}"), stop,
                                 on_ready=lambda role, folder: _check_converted(arena, request, role, folder, quiet))
    except DemoError as e:  # the calibration's own prepare tries again and says why
        report(f"calibrating: converting early did not work ({e}); it is tried again later")


def _check_converted(arena: WarmupHost, request: Optional[RaceRequest], role: str, folder: Path,
                     quiet: Optional[threading.Lock] = None) -> None:
    """Prove a freshly converted format with a race's threads on this CPU in the background,
    beside the other conversions: the chosen pair then loads at Ready without a check first
    (three such checks took 20 s before Ready on a Zen 4). Never during a measuring stage
    (`quiet`): a model loading beside the timing would skew what calibration reads."""
    if request is None or placement.kind(request.options.main_device) != "CPU":
        return

    def check() -> None:
        with quiet or contextlib.nullcontext():
            arena.guard.check_all([NativeConfig(str(folder), role, threads_for(request))])

    threading.Thread(target=check, name=f"startup-check-{role}-{folder.name}", daemon=True).start()


def needs_calibration(arena: WarmupHost, preset) -> bool:
    """Whether a launch calibrates this default preset: a GGUF pair (pypi or gguf sources, whose
    weight formats calibration chooses) with no result for this machine yet. A hub, export or
    local pair is used as shipped: Ready once it is warm."""
    from ..models.sources import has_formats

    return (preset.draft is not None and has_formats(preset.main) and has_formats(preset.draft)
            and load_cached(arena.store, preset) is None)


def _calibrate_once(arena: WarmupHost, request: RaceRequest, report: Callable[[str], None],
                    calibrator: Calibrator, quiet: Optional[threading.Lock] = None) -> bool:
    """Calibrate the default preset on this machine unless a result is cached (True if it
    calibrated now). Each measuring stage takes the CPU in its own admission slot, so a race
    waits one stage at most, seeing why in its status line."""
    preset = arena.presets.get(request.preset)
    if not needs_calibration(arena, preset):
        return False
    report("calibrating: the default pair is warm and races run now; measuring this machine once before Ready")

    def converting(message: str) -> None:
        arena.startup.update("preparing", f"preparing weight formats to measure this machine (races run "
                                          f"meanwhile, a little slower): {message}")
        report(f"calibrating: {message}")

    # Converting weights needs no quiet machine: visitors race meanwhile. The multi-threaded
    # part starts once the pair is warm, so it never delays the first race on few cores.
    calibrator.prepare_candidates(preset, arena.store, report=converting)

    @contextlib.contextmanager
    def slot(what: str):
        # One stage at a time holds the CPU: a visitor who arrives waits one stage, not all.
        ticket = arena.admission.enter(f"measuring this machine once ({what})")
        try:
            with quiet or contextlib.nullcontext():  # a background check started first ends first
                yield
        finally:
            ticket.release()

    def step(message: str) -> None:
        arena.startup.update("preparing", f"measuring this machine once (races wait at most one step): {message}")
        report(f"calibrating: {message}")

    def race_pair(main: str, draft: str, baseline: Optional[str], threads: Optional[int], precision: str = "f32") -> dict:
        # The very pipelines a race of these folders gets (the request's options at the precision
        # calibration chose, the guard's proofs, the cache's memory budget), so Ready finds the
        # chosen pair loaded and warm.
        options = request.options.with_threads(threads).with_precision(precision)
        return arena.cache.get(Path(main), Path(draft), request.settings.method, options,
                               baseline=Path(baseline) if baseline else None)

    result = calibrator.calibrate(preset, arena.store, report=step, slot=slot, race_pair=race_pair)
    for line in calibrator.summary_lines(result, arena.store.cache_dir):
        report(line)
    arena.forget_prepared(preset.name)  # `format: auto` now resolves to the calibrated choice
    return True
