"""What a ready IR folder is, and the scratch folders one is built in.

A model folder is used only once it holds the IR files and a `.ready.json` marker; it is
built in a scratch folder under `<cache>/tmp/` and published with one rename, so Ctrl-C, a
cancel or a full disk never leave a half model that later loads. Each scratch folder is
locked (fcntl.flock) while it is worked in, so cleanup removes only those of prepares that
are gone (a lock dies with its process, unlike a PID written into a name).
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import uuid
from pathlib import Path
from typing import Optional

READY_MARKER = ".ready.json"
IR_FILES = ("openvino_model.xml", "openvino_tokenizer.xml", "openvino_detokenizer.xml")


def is_ir_folder(path: Path) -> bool:
    return all((path / f).is_file() for f in IR_FILES)


def missing_ir_files(path: Path) -> list[str]:
    return [f for f in IR_FILES if not (path / f).is_file()]


def is_ready_folder(folder: Path) -> bool:
    return (folder / READY_MARKER).is_file() and is_ir_folder(folder)


def try_flock(fd: int) -> bool:
    """Take an exclusive flock on `fd` if nobody holds it; never blocks."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as e:
        if e.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = path.stat()
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (own.st_dev, own.st_ino) == (st.st_dev, st.st_ino)


class Scratch:
    """A scratch folder that is deleted unless published with one atomic rename.

    `<cache>/tmp/<name>/` is the folder, `<cache>/tmp/<name>.lock` its lock, taken before the
    folder exists and held until it is gone: whoever can take a scratch folder's lock knows
    that no prepare works in it any more.
    """

    def __init__(self, cache_dir: Path):
        self.root = cache_dir / "tmp"

    def __enter__(self) -> "Scratch":
        self.root.mkdir(parents=True, exist_ok=True)
        while True:
            name = uuid.uuid4().hex
            self.lock = self.root / f"{name}.lock"
            self.fd = os.open(self.lock, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            fcntl.flock(self.fd, fcntl.LOCK_EX)  # a new file: nobody holds it for long
            # A cleanup may have taken and removed the file between open and flock; then
            # our lock guards nothing that others can see: start again under a new name.
            if _same_file(self.fd, self.lock):
                break
            os.close(self.fd)
        self.path = self.root / name
        try:
            remove_stale_scratch(self.root)
            self.path.mkdir()
        except BaseException:
            self._release()
            raise
        return self

    def publish(self, final: Path) -> None:
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(self.path, final)
        except OSError:
            if is_ready_folder(final):
                return  # someone else finished the same model first; keep theirs
            shutil.rmtree(final, ignore_errors=True)  # an old, unmarked leftover
            os.replace(self.path, final)

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        self._release()

    def _release(self) -> None:
        try:
            self.lock.unlink()
        except FileNotFoundError:
            pass
        os.close(self.fd)


def remove_stale_scratch(root: Path) -> list[str]:
    """Delete the scratch folders (and lock files) under `root` that no running prepare holds.

    Returns the names removed. A folder whose lock someone holds is kept, whatever its name.
    """
    removed = []
    if not root.is_dir():
        return removed
    names = {e.name.removesuffix(".lock") for e in root.iterdir() if e.is_dir() or e.name.endswith(".lock")}
    for name in sorted(names):
        lock = root / f"{name}.lock"
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            continue
        try:
            if not try_flock(fd):
                continue  # a live prepare works there
            folder = root / name
            if folder.is_dir():
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(name)
            lock.unlink(missing_ok=True)
        finally:
            os.close(fd)
    return removed


def weight_bytes(folder) -> int:
    """Bytes of an IR folder's weight file (0 where it has none): what a loaded model holds at
    least, and where the memory estimates start."""
    return sum(f.stat().st_size for f in Path(folder).glob("openvino_model.bin"))


def max_context(folder: Path) -> Optional[int]:
    """Tokens a model can attend to, from its config.json when it has one (hub and
    optimum exports do) or from the context length recorded at prepare time."""
    import json

    for name, keys in (("config.json", ("max_position_embeddings", "n_positions", "seq_length")),
                       ("context.json", ("context_length",))):  # written by demo.models.sources for GGUF models
        try:
            data = json.loads((folder / name).read_text())
        except (OSError, ValueError):
            continue
        for k in keys:
            if isinstance(data.get(k), int) and data[k] > 0:
                return data[k]
    return None
