"""Writing a file so that a reader (or a crash) never sees half of it."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Union


def write_atomic(path: Union[str, Path], data: Union[str, bytes]) -> Path:
    """Write `data` to `path` through a temporary file beside it and one rename: readers see
    the old file or the new one, never a mix, even with writers in other threads or processes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_temporaries(path)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        if isinstance(data, str):
            tmp.write_text(data, encoding="utf-8")
        else:
            tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def clean_stale_temporaries(path: Path) -> None:
    """Delete the temporary files of writes to `path` that were killed before their rename
    (`<name>.<pid>.<thread>.tmp` of a process no longer running); a live writer's are kept."""
    for tmp in path.parent.glob(f"{glob_escape(path.name)}.*.*.tmp"):
        pid = tmp.name[len(path.name) + 1:].split(".")[0]
        if pid.isdigit() and not _running(int(pid)):
            tmp.unlink(missing_ok=True)


def glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: running
    return True
