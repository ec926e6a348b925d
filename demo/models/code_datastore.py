"""A datastore of Python sources for the own verify loop's datastore drafter (REST, He et al. 2024).

Built once per tokenizer from what this machine already has (the standard library, then the
installed packages, in a fixed order, up to a token budget), tokenized with the main model's
own tokenizer, and indexed by a hash of every 3-token window so a lookup is one binary search.
Nothing is downloaded, and nothing of the arena's own (its prompts, benchmarks or answers) is in
it: the project's checkout is never read.

Kept as three flat arrays under `<cache>/datastores/<tokenizer digest>-<budget>/` and read back
memory-mapped: 12 bytes a token (the token, the sorted windows and their hashes), so the default
budget of 8M tokens takes about 96 MB of disk and of page cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

import numpy as np

from ..core.errors import Cancelled, DemoError
from ..core.files import write_atomic

WINDOW = 3                 # tokens in the indexed window
DEFAULT_BUDGET = 8_000_000  # tokens
FORMAT_VERSION = 2  # 2: the installed packages of a virtual environment inside the checkout are read
MAX_FILE_BYTES = 400_000    # a generated or data-like .py file teaches little and costs much
_PRIME = np.uint64(0x9E3779B97F4A7C15)

Progress = Callable[[str, float, float], None]


def _nothing(*args) -> None:
    pass


@dataclass(frozen=True)
class Datastore:
    """tokens: every file's tokens, one after another; order: the start of every 3-token window,
    sorted by the window's hash; keys: those hashes, in that order (one binary search finds a window)."""

    tokens: np.ndarray
    keys: np.ndarray
    order: np.ndarray
    files: int

    @property
    def nbytes(self) -> int:
        return int(self.tokens.nbytes + self.keys.nbytes + self.order.nbytes)

    def positions(self, window) -> np.ndarray:
        """Where the 3 tokens `window` occur (start positions), collisions removed."""
        key = window_keys(np.asarray(window, dtype=np.uint32))[0]
        lo, hi = np.searchsorted(self.keys, key, "left"), np.searchsorted(self.keys, key, "right")
        found = np.asarray(self.order[lo:hi], dtype=np.int64)
        if found.size == 0:
            return found
        t = self.tokens
        ok = (t[found] == window[0]) & (t[found + 1] == window[1]) & (t[found + 2] == window[2])
        return found[ok]


def window_keys(tokens: np.ndarray) -> np.ndarray:
    """A 32-bit hash of every WINDOW-token window of `tokens` (len(tokens) - 2 keys)."""
    t = tokens.astype(np.uint64)
    h = np.zeros(max(0, len(t) - WINDOW + 1), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(WINDOW):
            h = (h ^ t[j:len(t) - WINDOW + 1 + j]) * _PRIME
    return (h >> np.uint64(32)).astype(np.uint32)


def source_files(exclude: Optional[Path] = None) -> Iterator[Path]:
    """The standard library's .py files, then the installed packages', each in sorted order;
    never the arena's own code under `exclude` (its checkout), though a virtual environment
    inside that checkout is read like any other."""
    paths = sysconfig.get_paths()
    stdlib = Path(paths["stdlib"]).resolve()
    packages = sorted({Path(paths["purelib"]).resolve(), Path(paths["platlib"]).resolve()})
    own = exclude.resolve() if exclude is not None else None
    environment = Path(sys.prefix).resolve()
    for root in [stdlib, *packages]:
        for path in sorted(root.rglob("*.py")):
            parents = path.parents
            if root == stdlib and any(p in parents for p in [*packages, stdlib / "site-packages"]):
                continue  # the base interpreter's own packages: not what this environment runs
            if own is not None and own in parents and environment not in parents:
                continue
            yield path


def _digest(tokenizer_folder: Path) -> str:
    h = hashlib.sha256()
    for name in ("openvino_tokenizer.xml", "openvino_tokenizer.bin"):
        path = tokenizer_folder / name
        if not path.is_file():
            raise DemoError(f"{tokenizer_folder.name} has no {name}; prepare the model again.")
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def folder_for(cache_dir: Path, tokenizer_folder: Path, budget: int = DEFAULT_BUDGET) -> Path:
    return Path(cache_dir) / "datastores" / f"python-{_digest(tokenizer_folder)}-{budget}-v{FORMAT_VERSION}"


def built_beside(model_folder: Path, budget: int = DEFAULT_BUDGET) -> Optional[Datastore]:
    """The datastore built for this model's tokenizer in the model store it lives in
    (`<cache>/models/<model>`), or None when none was built (`python -m demo.prepare --datastore`)."""
    try:
        folder = folder_for(Path(model_folder).parent.parent, Path(model_folder), budget)
    except DemoError:
        return None
    return load(folder) if (folder / "datastore.json").is_file() else None


def load(folder: Path) -> Datastore:
    meta = json.loads((folder / "datastore.json").read_text())
    arrays = {name: np.load(folder / f"{name}.npy", mmap_mode="r") for name in ("tokens", "keys", "order")}
    return Datastore(files=int(meta["files"]), **arrays)


def build(cache_dir: Path, tokenizer_folder: Path, budget: int = DEFAULT_BUDGET, progress: Progress = _nothing,
          cancelled: Callable[[], bool] = lambda: False, exclude: Optional[Path] = None,
          files: Optional[Iterable[Path]] = None) -> Datastore:
    """The datastore for this tokenizer: read from the cache, or built (tokenizing up to
    `budget` tokens of installed Python sources, or of `files`) and saved there first."""
    folder = folder_for(cache_dir, tokenizer_folder, budget)
    if (folder / "datastore.json").is_file():
        return load(folder)
    import openvino_genai

    if budget < 1000:
        raise DemoError("The datastore's budget must be at least 1,000 tokens.")
    tokenizer = openvino_genai.Tokenizer(str(tokenizer_folder))
    chunks, total, count = [], 0, 0
    for path in (source_files(exclude) if files is None else files):
        if cancelled():
            raise Cancelled("building the datastore was cancelled")
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                continue
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        ids = tokenizer.encode(text, add_special_tokens=False).input_ids.data[0]
        take = min(len(ids), budget - total)
        chunks.append(np.asarray(ids[:take], dtype=np.uint32))
        total += take
        count += 1
        progress("tokenizing Python sources for the datastore", total, budget)
        if total >= budget:
            break
    if total < WINDOW:
        raise DemoError("No Python sources were found to build the datastore from.")
    tokens = np.concatenate(chunks)
    keys = window_keys(tokens)
    order = np.argsort(keys, kind="stable").astype(np.uint32)
    keys = keys[order]
    scratch = folder.with_name(folder.name + f".tmp-{os.getpid()}")
    scratch.mkdir(parents=True, exist_ok=True)
    for name, array in (("tokens", tokens), ("keys", keys), ("order", order)):
        np.save(scratch / f"{name}.npy", array)
    write_atomic(scratch / "datastore.json", json.dumps(
        {"files": count, "tokens": int(len(tokens)), "window": WINDOW, "budget": budget,
         "python": sys.version.split()[0], "version": FORMAT_VERSION}))
    try:
        scratch.rename(folder)
    except OSError:  # another process finished first: use its copy
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)
    return load(folder)
