"""The engine's front door: presets + prepared models + pipelines + race, no UI.

    arena = Arena.create()
    for event in arena.run(RaceRequest(prompt="…")):
        ...  # ChunkEvent / DoneEvent / StatusEvent
    summary = arena.summarize(results, request)
"""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence, Union

from ..core import placement
from ..core.errors import DemoError
from ..core.explain import explain
from ..core.metrics import compare
from ..core.settings import FREE_DRAFT, PipelineOptions, cpu_cores, uses_draft_model
from ..core.streaming import BASELINE, HEARTBEAT_S, SPECULATIVE, ChunkEvent, DoneEvent, Heartbeat, StartEvent, StatusEvent
from ..models import load_store
from ..models.calibration_store import calibrated_baseline_attention, calibrated_precision, load_cached
from ..models.prepare import PreparedPair, prepare_preset
from ..models.presets import ExportSource, HubSource, PresetFile, load_presets
from ..models.sources import ModelStore, has_formats
from .admission import Admission, Cancelled, holding
from .calibration_words import baseline_caveat, calibration_words
from .race import fair, race
from .request import RaceRequest, Summary, how_it_ran, threads_for, validate_prompt, weights_note
from .native_guard import NativeConfig, NativeGuard, SafetyRecord
from .startup import Calibrator, StartupState, start_warmup
from .waiting import status_stream, with_last_message

__all__ = ["Arena", "RaceRequest", "Summary", "how_it_ran", "threads_for", "validate_prompt", "weights_note"]  # the front door


class Arena:
    """Presets, prepared models, loaded pipelines and the one admission point for the CPU.

    `allow_downloads`: whether a visitor may cause a hub download or an optimum export
    (minutes of network and CPU). Off by default: such presets are offered only once an
    operator has prepared them with `python -m demo.prepare --preset NAME`.
    """

    def __init__(self, presets: PresetFile, store: ModelStore, cache=None, admission: Optional[Admission] = None,
                 allow_downloads: bool = False, guard: Optional[NativeGuard] = None):
        from . import child_side
        from .pipelines import PipelineCache

        self.presets = presets
        self.store = store
        # Visitors' pipelines run one side per child process, so a Stop ends a prefill too
        # (child_side.py); a caller that passes its own cache (bench, calibration) keeps them here.
        self.cache = cache if cache is not None else PipelineCache(side_builder=child_side.build_child_side,
                                                                    pair_builder=child_side.build_pair)
        self.admission = admission or Admission()
        self.allow_downloads = allow_downloads
        # Proves each model × thread count in a child before this process compiles it.
        self.guard = guard or NativeGuard(SafetyRecord(store.cache_dir))
        if getattr(self.cache, "guard", False) is None:  # the pipeline cache refuses what this guard did not prove
            self.cache.guard = self.guard
        self._prepared: dict[tuple, PreparedPair] = {}  # (preset, main format, draft format)
        self._preset_locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()  # guards _preset_locks and _prepared
        self.startup = StartupState()

    @classmethod
    def create(cls, models_yaml: Optional[Path] = None, cache_dir: Optional[Path] = None,
               allow_downloads: bool = False) -> "Arena":
        return cls(load_presets(models_yaml), ModelStore(cache_dir), allow_downloads=allow_downloads)

    def devices(self) -> list[str]:
        from .pipelines import available_devices

        return available_devices()

    # -- presets a visitor may choose -----------------------------------------------------
    def needs_operator(self, preset_name: Optional[str]) -> Optional[str]:
        """None if a visitor may run this preset now, else the sentence saying why not.

        Presets whose weights come from a network (hub downloads, optimum exports) are
        offered only when already prepared, unless the operator allowed downloads.
        """
        preset = self.presets.get(preset_name)
        if self.allow_downloads:
            return None
        with self._locks_lock:  # prepare and calibration change _prepared from other threads
            if any(key[0] == preset.name for key in self._prepared):
                return None
        specs = [preset.main] + ([preset.draft] if preset.draft is not None else [])
        remote = [s for s in specs if isinstance(s, (HubSource, ExportSource))]
        if not remote or all(self.store.is_ready(s) for s in remote):
            return None
        return (f"The preset {preset.name!r} is not prepared on this machine; the operator can run "
                f"`python -m demo.prepare --preset {preset.name}` (or start the app with --allow-downloads).")

    def prepare(self, preset_name: Optional[str], status: Callable[[str], None] = lambda m: None,
                cancel: Optional[threading.Event] = None, main_format: Optional[str] = None,
                draft_format: Optional[str] = None, baseline_format: Optional[str] = None,
                stages: Optional[Callable[[str], None]] = None) -> PreparedPair:
        """Prepare a preset's models (in the given formats; `baseline_format`: the main model's
        for the baseline side, when other) once. Different presets prepare independently, so
        a long prepare of one never blocks visitors of another. `stages`: where each model's
        stages go (main and draft report side by side), if not to `status`."""
        preset = self.presets.get(preset_name)
        key = (preset.name, main_format, draft_format, baseline_format)
        if key in self._prepared:
            return self._prepared[key]
        reason = self.needs_operator(preset.name)
        if reason:
            raise DemoError(reason)
        with self._locks_lock:
            lock = self._preset_locks.setdefault(preset.name, threading.Lock())
        told = False
        while not lock.acquire(timeout=0.2):  # another visitor (or the launch) is preparing the same preset
            if cancel is not None and cancel.is_set():
                raise Cancelled("Stopped while waiting for the models to be prepared.")
            if not told:
                status("waiting for the models, which are being prepared now")
                told = True
        try:
            if key not in self._prepared:
                def progress(stage: str, done: float, total: float) -> None:
                    (stages or status)(f"{stage}: {100 * done / total:.0f}%" if total else f"{stage}…")

                pair = prepare_preset(preset, self.store, progress, main_format=main_format,
                                      draft_format=draft_format, cancel=cancel, baseline_format=baseline_format)
                with self._locks_lock:
                    self._prepared[key] = pair
            return self._prepared[key]
        finally:
            lock.release()

    def formats_for(self, request: RaceRequest) -> dict:
        """The weight formats a request runs on: its own if it names them; for fair mode,
        this machine's calibrated fair-mode choice where models.yaml says `auto` (one mode
        may favour formats another cannot fit: a race compiles the main model twice);
        otherwise models.yaml's (`auto`: the race's calibrated choice).

        `baseline_format`: where the main model is `auto`, the baseline runs what this
        machine's calibration measured fastest without a draft in the request's mode
        (Calibration.baseline), so the speedup a visitor reads is against the best this
        machine does alone; None keeps the speculative side's main. A request that names its
        formats, and exact mode (the proof that both sides give the same tokens), keep one
        main on both sides."""
        wanted = {"main_format": request.main_format, "draft_format": request.draft_format, "baseline_format": None}
        preset = self.presets.get(request.preset)
        if preset.draft is None:
            return wanted
        calibration = load_cached(self.store, preset)
        if calibration is None:
            return wanted
        mode = request.mode
        choice = calibration.choice.get("fair") if mode == "fair" else None
        for role, spec in (("main", preset.main), ("draft", preset.draft)):
            if wanted[f"{role}_format"] is None and getattr(spec, "format", None) == "auto" and choice:
                wanted[f"{role}_format"] = choice.format_of(role)
        fastest = calibration.baseline.get(mode)
        if (fastest is not None and request.main_format is None and not request.options.exact
                and getattr(preset.main, "format", None) == "auto"):
            wanted["baseline_format"] = fastest.main_format
        return wanted

    def prepared(self, request: RaceRequest) -> Optional[PreparedPair]:
        formats = self.formats_for(request)
        return self._prepared.get((self.presets.get(request.preset).name, formats["main_format"],
                                   formats["draft_format"], formats["baseline_format"]))

    def runners(self, request: RaceRequest, status: Callable[[str], None] = lambda m: None,
                cancel: Optional[threading.Event] = None) -> dict:
        """Prepare and load a request's pipelines (the caller holds the admission slot).
        Fair mode on a pair that does not fit in memory twice gets each side in turn:
        race.fair loads one side's pipeline, then the other's."""
        pair = self.prepare(request.preset, status, cancel=cancel, **self.formats_for(request))
        options = self.options_for(request).with_threads(self.threads_to_use(request, pair, status, cancel=cancel))
        load = self.cache.fair if request.mode == "fair" else self.cache.get
        return load(pair.main, pair.draft, request.settings.method, options, status, baseline=pair.baseline)

    def options_for(self, request: RaceRequest) -> PipelineOptions:
        """The request's options at the activation precision calibration chose (exact mode: f32
        anyway), a calibrated baseline (formats_for) on the attention backend chosen for it."""
        preset = self.presets.get(request.preset)
        options = request.options.with_precision(calibrated_precision(self.store, preset))
        if self.formats_for(request)["baseline_format"] is not None:
            options = options.with_baseline_attention(calibrated_baseline_attention(self.store, preset, request.mode))
        return options

    def native_configs(self, request: RaceRequest, pair: PreparedPair, threads: Optional[int]) -> list[NativeConfig]:
        """The model × thread count configurations a request compiles on the CPU."""
        o, out = self.options_for(request), []
        at = placement.cpu_precision(o)
        if placement.kind(o.main_device) == "CPU":
            m = request.settings.method  # the baseline's own compile where it is stateful and the pair is not
            sdpa = placement.baseline_stateful(o, m) and not placement.stateful(o, m)
            out += list(dict.fromkeys([NativeConfig(str(pair.main), "main", threads, precision=at), NativeConfig(
                str(pair.baseline or pair.main), "main", threads, precision=at, attention="SDPA" if sdpa else "PA")]))
        if uses_draft_model(request.settings.method) and pair.draft is not None and placement.kind(o.draft_device) == "CPU":
            # an EAGLE-3 head runs only beside its main, and must be seen accepting guesses (issue 4425)
            head_of = str(pair.main) if request.settings.method == "eagle3" else None
            out.append(NativeConfig(str(pair.draft), "draft", threads, main=head_of, precision=at))
        return out

    def threads_to_use(self, request: RaceRequest, pair: PreparedPair, status: Optional[Callable[[str], None]] = None,
                       prove: bool = True, cancel: Optional[threading.Event] = None,
                       wanted: Union[Optional[int], str] = "split") -> Optional[int]:
        """Threads per pipeline: `wanted` (by default the even split, threads_for), unless OpenVINO
        crashes with it on this CPU for these models; then all cores, then OpenVINO's default.
        With `prove`, a configuration never seen here is smoke-tested in a child first
        (NativeGuard; `cancel` stops it); without, only the record is read. Only a proven
        configuration is ever returned: the guard fails closed."""
        wanted = threads_for(request) if wanted == "split" else wanted
        choices = [wanted] + [n for n in (cpu_cores(), None) if n != wanted]
        reasons = []
        for n in choices:
            configs = self.native_configs(request, pair, n)
            if prove:
                self.guard.check_all(configs, status or (lambda m: None), cancel)
            if cancel is not None and cancel.is_set():
                raise Cancelled("Stopped while OpenVINO was being checked on this CPU.")
            unusable = [why for why in map(self.guard.why_not, configs) if why]
            if not unusable:
                return n
            reasons += unusable
        raise DemoError(f"{reasons[-1]}, and with every other thread count tried; choose another weight format "
                        "(python -m demo.doctor shows which run on this CPU).")

    def loads_in_turn(self, request: RaceRequest) -> bool:
        """Whether a fair request's pipelines are loaded one side at a time (PipelineCache.in_turn)."""
        pair = self.prepared(request)
        in_turn = getattr(self.cache, "in_turn", None)
        if request.mode != "fair" or pair is None or in_turn is None:
            return False
        return in_turn(self.cache.key(pair.main, pair.draft, request.settings.method, self.options_for(request).with_threads(None),
                                      pair.baseline))

    # -- running --------------------------------------------------------------------------
    def run(self, request: RaceRequest, stop: Optional[threading.Event] = None,
            visitor: Sequence[str] = (), heartbeats: bool = False
            ) -> Iterator[Union[StatusEvent, StartEvent, ChunkEvent, DoneEvent, None]]:
        """Validate, wait for the CPU, prepare and load (StatusEvents), then race or run in turn; `visitor`:
        whose job it is (Admission.claim). Closing the iterator at any point stops the work without waiting.
        With `heartbeats`, HEARTBEAT is also yielded while nothing happens (a prefill, a side loading in fair
        mode), so a consumer that can be closed only between two yields (a web handler) can be stopped."""
        prompt = validate_prompt(request.prompt)
        settings = request.settings.validated()
        placement.check_options(request.options, settings)
        stop = stop or threading.Event()
        what = "a fair measurement" if request.mode == "fair" else "a race"
        with self.admission.visiting(what, visitor):  # one job per visitor, while this stream lasts
            ticket, runners = yield from self.admitted(
                what, stop, lambda status: self.prepare(request.preset, status, cancel=stop, **self.formats_for(request)),
                lambda status, pair: self.runners(request, status, cancel=stop))

            def start() -> Iterator:
                for runner in runners.values():  # a too-long prompt: one refusal, before any side starts
                    check = getattr(runner, "check_prompt", None)
                    if check is not None:
                        check(prompt, settings)
                beat = HEARTBEAT_S if heartbeats else None
                if request.mode == "race":
                    return race(runners, prompt, settings, stop, on_finished=ticket.release, heartbeat_s=beat)
                return fair(runners, prompt, settings, stop, on_finished=ticket.release,
                            on_status=lambda m: StatusEvent(f"fair mode: {m}"), heartbeat_s=beat)

            yield from holding(ticket, start)

    def admitted(self, what: str, stop: threading.Event, prepare: Callable, load: Callable):
        """Wait for the CPU (the admission slot), then prepare and load in it (a download or an export
        is heavy too), yielding StatusEvents meanwhile; returns (ticket, what `load(status, prepared)`
        returned). If either fails, or the caller goes away, the slot is given back."""
        def admit_and_load(status):
            ticket = self.admission.enter(what, stop, status)
            try:
                return ticket, load(status, prepare(status))
            except BaseException:
                ticket.release()
                raise

        loaded: list = []
        try:
            # A heartbeat while nothing changes: a cancel (Stop, closed tab) reaches a job waiting in line.
            stream = status_stream(admit_and_load, loaded, on_abandoned=lambda r: r[0].release())
            for message in with_last_message(stream, f"getting {what} ready"):
                yield StatusEvent(message)
        finally:
            if not loaded:
                stop.set()  # closed while waiting or loading: the loader gives its slot back
        return loaded[0]

    def load_with_status(self, request: RaceRequest, out: Optional[list] = None,
                         stages: Optional[Callable[[str], None]] = None) -> Iterator[str]:
        """Prepare and load the request's pipelines in the admission slot, yielding status
        messages meanwhile (each model's prepare stages go to `stages` if given). The runners
        are appended to `out`."""
        stop = threading.Event()

        def work(status):
            self.prepare(request.preset, status, cancel=stop, stages=stages, **self.formats_for(request))
            # Not "runs ahead of you": nobody waits here but the launch, maybe behind a visitor's own race.
            ticket = self.admission.enter("loading models", stop,
                                          lambda m: status("waiting for the run in progress to end, then loading the models"))
            try:
                return self.runners(request, status, cancel=stop)
            finally:
                ticket.release()

        try:
            yield from (m for m in status_stream(work, out if out is not None else []) if not isinstance(m, Heartbeat))
        finally:
            stop.set()

    def start_background_warmup(self, report: Callable[[str], None] = lambda m: None,
                                calibrator: Optional[Calibrator] = None) -> threading.Thread:
        """Prepare and load the default pair now, not when the first visitor arrives; with a
        `calibrator`, then measure this machine once with it if it never was (demo.engine.startup)."""
        return start_warmup(self, report, calibrator)

    def forget_prepared(self, preset_name: str) -> None:
        """Look the preset's folders up again (after calibration changed what `auto` means)."""
        with self._locks_lock:
            for key in [k for k in self._prepared if k[0] == preset_name]:
                self._prepared.pop(key, None)

    def skipped_configurations(self) -> list[str]:
        """Sentences for the configurations OpenVINO crashed on here (demo.engine.native_guard), for the page."""
        return sorted({entry["detail"] for entry in self.guard.record.crashes().values()})

    def default_assistant_tokens(self, preset_name: Optional[str], mode: str = "race") -> int:
        """K for a preset: this machine's calibrated choice if it has one, else models.yaml's."""
        preset = self.presets.get(preset_name)
        result = load_cached(self.store, preset)
        choice = result.choice.get(mode) if result is not None else None
        return choice.k if choice is not None else preset.assistant_tokens

    # -- results --------------------------------------------------------------------------
    def summarize(self, results: dict, request: RaceRequest) -> Summary:
        base, spec = results[BASELINE], results[SPECULATIVE]
        comparison = compare(base, spec)
        pair = self.prepared(request)
        if pair is not None and pair.baseline is not None and comparison.verdict != "identical":
            # Not a fault of speculation: the baseline ran other weights (weights_note).
            comparison = replace(comparison, verdict=f"{comparison.verdict}; the two sides read different main "
                                                     f"weights ({pair.baseline_format} and {pair.main_format})")
        mode = request.mode
        return Summary.of(comparison, how=self._how(request),
                          weights=weights_note(pair, mode) if pair is not None and pair.baseline is not None else None,
                          errors={side: r.error for side, r in results.items() if r.error},
                          guess_sources=getattr(spec, "guess_sources", None),
                          baseline_note=self.baseline_caveat(request, pair) if pair is not None else None,
                          # "Why this speedup?" reads OpenVINO GenAI's own timers, which the own loop has not
                          why=None if request.settings.method == FREE_DRAFT else
                          lambda c: explain(base, spec, c.speedup, request.settings.assistant_tokens,
                                            self.calibration_for(request), request.settings.method))

    def baseline_caveat(self, request: RaceRequest, pair: PreparedPair) -> Optional[str]:
        """calibration_words.baseline_caveat for a request on its prepared pair."""
        preset = self.presets.get(request.preset)
        calibratable = (preset.draft is not None and has_formats(preset.main) and has_formats(preset.draft)
                        and getattr(preset.main, "format", None) == "auto")
        options = self.options_for(request)
        attention = "SDPA" if placement.baseline_stateful(options, request.settings.method) else "PA"
        return baseline_caveat(load_cached(self.store, preset) if calibratable else None, pair,
                               request.mode, attention, exact=request.options.exact,
                               named=request.main_format is not None, calibratable=calibratable)

    def _how(self, request: RaceRequest) -> str:
        """How the race was run, in words, with the threads really used."""
        wanted, used, pair = threads_for(request), threads_for(request), self.prepared(request)
        if pair is not None:
            try:
                used = self.threads_to_use(request, pair, prove=False)
            except DemoError:
                pass
        how = how_it_ran(request.mode, self.options_for(request), request.settings.method, used, self.loads_in_turn(request))
        if used != wanted:
            how += (f"; OpenVINO crashes on this CPU with {wanted} thread{'s' if wanted != 1 else ''} per pipeline "
                    "for these models, so that split was skipped")
        return how

    def calibration_for(self, request: RaceRequest) -> Optional[dict]:
        """What this machine's calibration (demo.calibrate) says about the request: the
        prediction for its formats, mode and K against the baseline it races, and the fastest
        main-alone configuration measured in the request's mode."""
        preset = self.presets.get(request.preset)
        pair = self.prepared(request)
        result = load_cached(self.store, preset)
        record = load_store.load(self.store, preset)  # the load benchmark's crossover, if measured here
        under_load = {"under_load": record.sentence()} if record is not None else {}
        if result is None or pair is None:
            return under_load or None
        return {**calibration_words(result, pair, request.mode,
                                    request.settings.assistant_tokens), **under_load}

