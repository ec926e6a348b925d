"""Files that cross the page: what a visitor may upload, and what the page writes for download.

Uploads: Gradio stores every `POST /gradio_api/upload` on disk (an hour, until delete_cache),
so the launch caps their size (MAX_UPLOAD_BYTES, app.launch). The only upload the page takes
is a recording, so the cap is a recording's cap with room to spare.

Downloads (the scoreboard's CSV, a benchmark's JSON and plot, a race's recording): written
straight into Gradio's cache folder, so Gradio serves them without a second copy of its own,
each in a folder named by a random token (Gradio serves anything in that folder to whoever
names its path, so the name must not be guessable), and at most `keep` of each kind: writing
a new one deletes the oldest. With `max_age_s`, files older than that go too: at the next write,
or by one sweeper thread per Downloads that looks every SWEEP_S seconds while any are on disk.
"""

from __future__ import annotations

import secrets
import shutil
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from gradio.utils import get_upload_folder

from ..records import recording

# The only upload is a recording: at most recording.MAX_BYTES (~1.1 MB; a real one is 3-14 kB).
# A little more, so a file just over that limit gets the recording's own sentence; anything
# bigger is refused by Gradio before it reaches the disk.
MAX_UPLOAD_BYTES = recording.MAX_BYTES + 64 * 1024
SWEEP_S = 30.0


class Downloads:
    """Files of one kind handed to visitors; at most `keep` on disk at any time."""

    def __init__(self, kind: str, keep: int, max_age_s: Optional[float] = None,
                 root: Optional[Callable[[], Path]] = None):
        self.kind = kind
        self.keep = keep
        self.max_age_s = max_age_s
        self._root = root or (lambda: Path(get_upload_folder()))  # read per write: GRADIO_TEMP_DIR may change
        self._lock = threading.Lock()
        self._folders: list[tuple[float, Path]] = []  # (created, folder), oldest first
        self._sweeper: Optional[threading.Thread] = None

    def new_folder(self) -> Path:
        """A fresh folder for one download (one or more files); the oldest beyond `keep` are deleted.

        Callers write into it right away: it counts from now, and may be deleted once `keep`
        newer ones exist.
        """
        folder = self._root() / f"arena-{self.kind}-{secrets.token_hex(16)}"
        folder.mkdir(parents=True, mode=0o700)
        with self._lock:
            self._folders.append((time.time(), folder))
            if self.max_age_s is not None and self._sweeper is None:
                self._sweeper = threading.Thread(target=self._sweep, name=f"downloads-{self.kind}", daemon=True)
                self._sweeper.start()
        self.expire()
        return folder

    def expire(self) -> None:
        """Delete all but the newest `keep`, and those older than max_age_s."""
        now = time.time()
        with self._lock:
            old = self._folders[:-self.keep] if len(self._folders) > self.keep else []
            if self.max_age_s is not None:
                old += [(t, f) for t, f in self._folders[-self.keep:] if now - t > self.max_age_s]
            for entry in old:
                self._folders.remove(entry)
        for _, f in old:
            shutil.rmtree(f, ignore_errors=True)

    def _sweep(self) -> None:
        while True:
            time.sleep(min(SWEEP_S, self.max_age_s))
            self.expire()
            with self._lock:
                if not self._folders:  # nothing left to age: the next write starts a new sweeper
                    self._sweeper = None
                    return

    def on_disk(self) -> tuple[int, int]:
        """(files, bytes) this kind holds now (for tests and the soak)."""
        files = size = 0
        with self._lock:
            folders = [f for _, f in self._folders]
        for folder in folders:
            for p in folder.glob("*"):
                if p.is_file():
                    files += 1
                    size += p.stat().st_size
        return files, size
