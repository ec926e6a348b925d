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
