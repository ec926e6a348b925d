"""Files that cross the page: what a visitor may upload, and what the page writes for download.

Uploads: Gradio stores every `POST /gradio_api/upload` on disk (an hour, until delete_cache),
so the launch caps their size (MAX_UPLOAD_BYTES, app.launch). The only upload the page takes
is a recording, so the cap is a recording's cap with room to spare.

Downloads (the scoreboard's CSV, a benchmark's JSON and plot, a race's recording): written
straight into Gradio's cache folder, so Gradio serves them without a second copy of its own,
each in a folder named by a random token (Gradio serves anything in that folder to whoever
names its path, so the name must not be guessable), and at most `keep` of each kind. A new one
deletes only its own visitor's older ones past `keep_each`, and others' only once they are
GRACE_S old (time enough to fetch them): one stranger writing download after download never
deletes another visitor's pending file; while too many are that young, the write is refused
with a sentence. With `max_age_s`, files older than that go too: at the next write, or by one
sweeper thread per Downloads that looks every SWEEP_S seconds while any are on disk.
"""

from __future__ import annotations

import secrets
import shutil
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from gradio.utils import get_upload_folder

from ..core.errors import DemoError
from ..records import recording

# The only upload is a recording: at most recording.MAX_BYTES (~1.1 MB; a real one is 3-14 kB).
# A little more, so a file just over that limit gets the recording's own sentence; anything
# bigger is refused by Gradio before it reaches the disk.
MAX_UPLOAD_BYTES = recording.MAX_BYTES + 64 * 1024
SWEEP_S = 30.0
GRACE_S = 120.0  # a download this young may still be fetched by its visitor: only its owner replaces it
KEEP_EACH = 2    # a visitor's own newest downloads of one kind (the page offers the latest)


class Downloads:
    """Files of one kind handed to visitors; at most `keep` on disk at any time."""

    def __init__(self, kind: str, keep: int, max_age_s: Optional[float] = None,
                 root: Optional[Callable[[], Path]] = None, keep_each: int = KEEP_EACH,
                 clock: Optional[Callable[[], float]] = None):
        self.kind = kind
        self.keep = keep
        self.keep_each = keep_each
        self.max_age_s = max_age_s
        self.clock = clock or (lambda: time.time())
        self._root = root or (lambda: Path(get_upload_folder()))  # read per write: GRADIO_TEMP_DIR may change
        self._lock = threading.Lock()
        self._folders: list[tuple[float, Path, str]] = []  # (created, folder, owner), oldest first
        self._sweeper: Optional[threading.Thread] = None

    def new_folder(self, owner: str = "") -> Path:
        """A fresh folder for one download (one or more files) of `owner` (a visitor key; "" for
        none). Callers write into it right away: it counts from now. Raises DemoError while `keep`
        younger than GRACE_S belong to others."""
        now = self.clock()
        with self._lock:
            mine = [e for e in self._folders if e[2] == owner]
            old = mine[:max(0, len(mine) + 1 - self.keep_each)]  # the owner's own, past keep_each
            rest = [e for e in self._folders if e not in old]
            spare = [e for e in rest if now - e[0] > GRACE_S]
            old += spare[:max(0, len(rest) + 1 - self.keep)]
            if len(self._folders) - len(old) + 1 > self.keep:
                raise DemoError("Too many downloads are waiting to be fetched just now; try again in two minutes.")
            for entry in old:
                self._folders.remove(entry)
            folder = self._root() / f"arena-{self.kind}-{secrets.token_hex(16)}"
            self._folders.append((now, folder, owner))
            if self.max_age_s is not None and self._sweeper is None:
                self._sweeper = threading.Thread(target=self._sweep, name=f"downloads-{self.kind}", daemon=True)
                self._sweeper.start()
        try:
            folder.mkdir(parents=True, mode=0o700)
        except OSError:
            with self._lock:
                self._folders = [e for e in self._folders if e[1] != folder]
            raise
        finally:
            for entry in old:
                shutil.rmtree(entry[1], ignore_errors=True)
        self.expire()
        return folder

    def expire(self) -> None:
        """Delete those older than max_age_s."""
        now = self.clock()
        with self._lock:
            old = [e for e in self._folders if self.max_age_s is not None and now - e[0] > self.max_age_s]
            for entry in old:
                self._folders.remove(entry)
        for entry in old:
            shutil.rmtree(entry[1], ignore_errors=True)

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
            folders = [e[1] for e in self._folders]
        for folder in folders:
            for p in folder.glob("*"):
                if p.is_file():
                    files += 1
                    size += p.stat().st_size
        return files, size
