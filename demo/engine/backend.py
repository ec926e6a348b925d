"""Backend: what the page (demo.web), app.py and the engine's visitor paths use of an arena.

Two classes implement it: demo.engine.arena.Arena (pipelines in this process) and
demo.serve.remote.RemoteArena (pipelines on a Ray Serve cluster; where the cluster cannot
do something, it raises a one-sentence DemoError). Gradio-free, like the rest of the engine.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Callable, Iterator, Optional, Protocol, Sequence, runtime_checkable

if TYPE_CHECKING:  # annotations only: importing these here would load the models layer for nothing
    from ..models.prepare import PreparedPair
    from ..models.presets import PresetFile
    from ..models.sources import ModelStore
    from .admission import Admission
    from ..core.settings import PipelineOptions
    from .request import RaceRequest, Summary
    from .startup import Calibrator, StartupState


@runtime_checkable
class Backend(Protocol):
    """The arena's front door, as its callers see it."""

    presets: "PresetFile"
    store: "ModelStore"          # the model store (its cache_dir holds the scoreboard)
    admission: "Admission"       # the one admission point: one job per visitor, one run on the CPU
    startup: "StartupState"      # how far the launch warm-up got; the page polls it
    cache: object                # loaded pipelines (three-way race); the cluster's refuses to load
    guard: object                # the NativeGuard: proves each model × thread count before it is compiled here

    # -- what a visitor may choose -------------------------------------------------------
    def devices(self) -> list[str]: ...

    def needs_operator(self, preset_name: Optional[str]) -> Optional[str]: ...

    def default_assistant_tokens(self, preset_name: Optional[str], mode: str = "race") -> int: ...

    def skipped_configurations(self) -> list[str]: ...

    # -- preparing and loading (chat, three-way, step view, bench) ------------------------
    def prepare(self, preset_name: Optional[str], status: Callable[[str], None] = ...,
                cancel: Optional[threading.Event] = None, main_format: Optional[str] = None,
                draft_format: Optional[str] = None) -> "PreparedPair": ...

    def prepared(self, request: "RaceRequest") -> Optional["PreparedPair"]: ...

    def formats_for(self, request: "RaceRequest") -> dict: ...

    def options_for(self, request: "RaceRequest") -> "PipelineOptions": ...

    def runners(self, request: "RaceRequest", status: Callable[[str], None] = ...,
                cancel: Optional[threading.Event] = None) -> dict: ...

    def threads_to_use(self, request: "RaceRequest", pair: "PreparedPair", status: Optional[Callable[[str], None]] = None,
                       prove: bool = True, cancel: Optional[threading.Event] = None,
                       wanted: object = "split") -> Optional[int]: ...

    def admitted(self, what: str, stop: threading.Event, prepare: Callable, load: Callable): ...

    # -- running and results --------------------------------------------------------------
    def run(self, request: "RaceRequest", stop: Optional[threading.Event] = None,
            visitor: Sequence[str] = (), heartbeats: bool = False) -> Iterator: ...

    def summarize(self, results: dict, request: "RaceRequest") -> "Summary": ...

    def start_background_warmup(self, report: Callable[[str], None] = ...,
                                calibrator: Optional["Calibrator"] = None) -> Optional[threading.Thread]: ...
