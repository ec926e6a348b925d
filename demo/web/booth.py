"""What an operator chose for this page (kiosk, idle time, keeping prompts) and what every
finished race leaves behind on the page: a scoreboard row and a recording to download.

demo.web.ui calls, inside its race tab, `after_race = booth.race_tab(arena)` (a download button
under the chart, and the hooks its race handler calls when a race starts and finishes),
then `booth.add_tabs(arena, …)` for the Chat, Three-way, Recordings and Scoreboard tabs, and
`booth.install_kiosk(demo, examples)` when the page runs as a kiosk.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import gradio as gr

from ..core.errors import DemoError
from ..records import outcomes, recording
from ..records.scoreboard import Scoreboard
from .files import Downloads
from .visitors import owner_of

log = logging.getLogger(__name__)

MIN_IDLE_S, MAX_IDLE_S = 1.0, 3600.0
# A recording holds its visitor's prompt. With --keep-prompts the operator keeps text anyway;
# without, a recording stays on disk only while its visitor may still press Download.
KEEP_RECORDING_FILES = 200
KEEP_PRIVATE_RECORDINGS = 32
PRIVATE_RECORDING_S = 600.0


class RecordingFiles:
    """Recordings written for download (demo.web.files.Downloads): at most `keep` of them, and
    with `max_age_s` none older than that."""

    def __init__(self, keep: int = KEEP_RECORDING_FILES, max_age_s: Optional[float] = None):
        self.downloads = Downloads("recording", keep=keep, max_age_s=max_age_s)

    @classmethod
    def for_page(cls, keep_prompts: bool) -> "RecordingFiles":
        if keep_prompts:
            return cls(KEEP_RECORDING_FILES)
        return cls(KEEP_PRIVATE_RECORDINGS, max_age_s=PRIVATE_RECORDING_S)

    def write(self, rec: recording.Recording, owner: str = "") -> Path:
        data = recording.dumps(rec)
        path = self.downloads.new_folder(owner) / f"arena-{rec.kind}-{time.strftime('%Y%m%d-%H%M%S')}.json"
        path.write_bytes(data)
        return path


@dataclass
class Booth:
    kiosk: bool = False
    idle_seconds: float = 45.0
    keep_prompts: bool = False
    scoreboard_path: Optional[Path] = None       # None: <cache folder>/scoreboard.sqlite
    recordings_dir: Path = recording.RECORDINGS_DIR
    files: Optional[RecordingFiles] = field(default=None, repr=False)  # None: RecordingFiles.for_page
    _board: Optional[Scoreboard] = field(default=None, init=False, repr=False)

    def __post_init__(self):
        if self.files is None:
            self.files = RecordingFiles.for_page(self.keep_prompts)
        ok = isinstance(self.idle_seconds, (int, float)) and MIN_IDLE_S <= self.idle_seconds <= MAX_IDLE_S
        if not ok:
            raise DemoError(f"The kiosk's idle time must be from {MIN_IDLE_S:g} to {MAX_IDLE_S:g} seconds; "
                            "pass e.g. --idle-seconds 45.")

    def board(self, arena) -> Scoreboard:
        if self._board is None:
            path = self.scoreboard_path or Path(arena.store.cache_dir) / "scoreboard.sqlite"
            self._board = Scoreboard(path, keep_prompts=self.keep_prompts)
        return self._board

    # -- the race tab --------------------------------------------------------------------
    def race_tab(self, arena) -> "RaceHooks":
        download = gr.DownloadButton("Download this race as a recording (JSON)", visible=False,
                                     elem_id="race-recording", size="sm")
        return RaceHooks(self, arena, download)

    def finish(self, arena, request, results: dict, how: str, kind: str, download, visitor=()) -> dict:
        """After a finished race: the scoreboard row and the recording; a warning (never an
        error) when either fails, so the visitor still gets the race's summary."""
        try:
            outcome = outcomes.after_race(arena, request, results, how, self.board(arena), kind=kind)
        except Exception:  # a bug here must not cost the visitor the race they just watched
            log.exception("recording a finished race failed")
            gr.Warning("This race could not be recorded on the scoreboard; the next one will try again.")
            return {}
        if outcome is None:
            return {}
        if outcome.warning:
            gr.Warning(outcome.warning)
        if outcome.recording is None or self.kiosk:
            return {}
        try:
            path = self.files.write(outcome.recording, owner_of(visitor))
        except DemoError as e:
            gr.Warning(f"This race could not be saved for download ({e}); the scoreboard has it.")
            return {}
        except OSError as e:  # its path and errno go to the log, not to the page
            log.warning("writing a race's recording for download failed: %s", e)
            gr.Warning("This race could not be saved for download (the disk may be full); the scoreboard has it.")
            return {}
        return {download: gr.DownloadButton(value=str(path), visible=True)}

    # -- the other tabs and the kiosk ----------------------------------------------------------
    def add_tabs(self, arena, race_handlers: int, door=None) -> None:
        from . import chat_tab, recordings_tab, scoreboard_tab, three_way_tab
        from .visitors import QueueDoor, VisitorIds

        door = door or QueueDoor(VisitorIds(), arena.admission)
        with gr.Tab("Chat", id="chat"):
            chat_tab.build(arena, race_handlers, self.kiosk, door)
        with gr.Tab("Three-way race", id="three-way"):
            three_way_tab.build(arena, self, race_handlers, door)
        with gr.Tab("Recorded races", id="recordings"):
            recordings_tab.build(self, arena.admission, door)
        with gr.Tab("Scoreboard", id="scoreboard") as tab:
            scoreboard_tab.build(arena, self, tab, door)

    def install_kiosk(self, demo: gr.Blocks, examples: list) -> None:
        if self.kiosk:
            from . import kiosk

            kiosk.install(demo, examples, self.idle_seconds)


class RaceHooks:
    """What demo.web.ui's race handler calls: `started()` when a race begins (hides the last
    race's download) and `finished(request, results, summary)` when it is over."""

    def __init__(self, booth: Booth, arena, download):
        self.booth, self.arena, self.download = booth, arena, download
        self.components = {"recording": download}

    def started(self) -> dict:
        return {self.download: gr.DownloadButton(visible=False)}

    def finished(self, request, results: dict, summary, visitor=()) -> dict:
        return self.booth.finish(self.arena, request, results, summary.how, "race", self.download, visitor)
