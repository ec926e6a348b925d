"""Model sources: turn a preset's model spec into a local OpenVINO IR folder.

Every source ends in a folder that `openvino_genai.LLMPipeline` and `draft_model` can load
(openvino_model.xml + tokenizer/detokenizer IR). Preparing is idempotent and atomic: work
happens in a scratch folder under `<cache>/tmp/` and is moved into place with one rename
only after it is complete, with a `.ready.json` marker inside. A folder without that marker
is never used, so Ctrl-C, a cancel or a full disk can not leave a half model that later loads.

pypi and gguf models can be prepared in several weight formats (demo/models/formats.py), each its
own folder: the GGUF reader's IR (`gguf`, the default), the f16 folder made from it, and the
compressed formats made from the f16 one, so every step happens once per model.

Several processes (or threads) may share one cache. Each prepare takes an advisory lock
(fcntl.flock) on its target, so a second prepare of the same model waits for the first and
then reuses its folder; and each scratch folder is locked while it is worked in, so that
cleanup removes only the scratch folders of prepares that are gone (a lock dies with its
process, unlike a PID written into a name, which the system hands out again).
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

from ..core.errors import Cancelled, DemoError
from . import fetchers, formats
from .fetchers import POLL_SECONDS, Progress
from .folders import READY_MARKER, Scratch, is_ir_folder, is_ready_folder, missing_ir_files, try_flock
from .formats import AUTO, DEFAULT_FORMAT, FORMATS
from .presets import ExportSource, GgufSource, HubSource, LocalSource, ModelSpec, PypiSource

CACHE_ENV = "SPECDEC_CACHE_DIR"


def no_progress(stage: str, done: float, total: float) -> None:
    """The default Progress: report nothing."""


def _checkpoint(cancel: Optional[threading.Event], role: str) -> Callable[[], None]:
    """A function to call between steps: it raises Cancelled once `cancel` is set."""

    def check() -> None:
        if cancel is not None and cancel.is_set():
            raise Cancelled(f"Preparing the {role} was cancelled; nothing half-prepared was kept.")

    return check


PERSISTENT_STORAGE = Path("/data")  # a Hugging Face Space's persistent storage, when it has some


def default_cache_dir(persistent: Path = PERSISTENT_STORAGE) -> Path:
    """$SPECDEC_CACHE_DIR; else <persistent>/speculative-arena when `persistent` (a Space's
    /data) is a writable folder, so prepared models and the calibration survive a restart;
    else $XDG_CACHE_HOME/speculative-arena, else ~/.cache/speculative-arena."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    if persistent.is_dir() and os.access(persistent, os.W_OK | os.X_OK):
        return persistent / "speculative-arena"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "speculative-arena"


def has_formats(spec: ModelSpec) -> bool:
    """Whether `spec` can be prepared in the weight formats of demo/models/formats.py (pypi and gguf can)."""
    return isinstance(spec, (PypiSource, GgufSource))


@dataclass
class PreparedModel:
    path: Path
    reused: bool  # True when the cache already held it
    seconds: float
    weight_format: Optional[str] = None  # one of formats.FORMATS; None for sources used as shipped


class ModelStore:
    """Prepares models into a cache folder. One instance per cache directory."""

    def __init__(self, cache_dir: Optional[Path | str] = None):
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()

    # -- formats ------------------------------------------------------------------------
    def resolve_format(self, spec: ModelSpec, weight_format: Optional[str] = None,
                       role: str = "model") -> Optional[str]:
        """The concrete format prepare() makes: `weight_format`, else the spec's own; auto resolved.

        None for sources that are used as shipped (hub, export, local); asking one of those
        for a format is a DemoError.
        """
        if not has_formats(spec):
            if weight_format not in (None, AUTO):
                raise DemoError(
                    f"The {role} comes from a `{spec.source}` source, which is used as shipped; weight "
                    f"formats such as {weight_format} apply only to `pypi` and `gguf` models."
                )
            return None
        fmt = weight_format or spec.format
        if fmt == AUTO:
            fmt = formats.resolve_auto_format(spec, role, self)
        if fmt not in FORMATS:
            raise DemoError(
                f"Unknown weight format {fmt!r} for the {role}; choose one of: {', '.join(FORMATS + (AUTO,))}."
            )
        return fmt

    def prepared_formats(self, spec: ModelSpec) -> list[str]:
        """The formats of `spec` that are ready now (empty for sources without formats)."""
        if not has_formats(spec):
            return []
        return [f for f in FORMATS if self.ready_path(spec, f) is not None]

    # -- where things live -------------------------------------------------------------
    def folder_for(self, spec: ModelSpec, weight_format: Optional[str] = None) -> Path:
        """The final IR folder for a spec in a format (it may not exist yet)."""
        if isinstance(spec, LocalSource):
            return Path(spec.path).expanduser()
        if isinstance(spec, HubSource):
            raise ValueError("hub models live in huggingface_hub's cache; use ready_path()")
        fmt = self.resolve_format(spec, weight_format)
        if fmt is not None:
            spec = spec.model_copy(update={"format": fmt})
        # Only what was set: a new optional field in the schema must not orphan old caches,
        # and the default format leaves the folder name of the days before formats.
        digest = hashlib.sha256(spec.model_dump_json(exclude_defaults=True).encode()).hexdigest()[:12]
        label = {
            PypiSource: lambda s: s.package.format(i="").rstrip("-_"),
            GgufSource: lambda s: Path(s.path).stem,
            ExportSource: lambda s: f"{s.repo.replace('/', '--')}-{s.weight_format}",
        }[type(spec)](spec)
        if fmt not in (None, DEFAULT_FORMAT):
            label += f"-{fmt}"
        label = re.sub(r"[^A-Za-z0-9._-]+", "-", label)
        return self.cache_dir / "models" / f"{spec.source}-{label}-{digest}"

    def lock_path(self, folder: Path) -> Path:
        """The file a prepare of `folder` holds an flock on (kept: removing it would race)."""
        return self.cache_dir / "locks" / f"{folder.name}.lock"

    def is_ready(self, spec: ModelSpec, weight_format: Optional[str] = None) -> bool:
        try:
            return self.ready_path(spec, weight_format) is not None
        except DemoError:
            return False

    def ready_path(self, spec: ModelSpec, weight_format: Optional[str] = None) -> Optional[Path]:
        """The IR folder if it is complete now, else None (never downloads or converts)."""
        fmt = self.resolve_format(spec, weight_format)
        if isinstance(spec, LocalSource):
            p = Path(spec.path).expanduser()
            return p if is_ir_folder(p) else None
        if isinstance(spec, HubSource):
            return self._hub_snapshot(spec, local_only=True)
        folder = self.folder_for(spec, fmt)
        return folder if is_ready_folder(folder) else None

    # -- preparing ----------------------------------------------------------------------
    def prepare(self, spec: ModelSpec, role: str = "model", progress: Progress = no_progress,
                weight_format: Optional[str] = None,
                cancel: Optional[threading.Event] = None) -> PreparedModel:
        """Make sure `spec` is an IR folder on disk, in `weight_format` (None: the spec's own), and return it.

        Setting `cancel` stops the work at the next step and raises Cancelled; a full disk
        raises a DemoError that says how much room the model needs and where.
        """
        start = time.perf_counter()
        fmt = self.resolve_format(spec, weight_format, role)
        checkpoint = _checkpoint(cancel, role)
        try:
            path, reused = self._prepare(spec, fmt, role, progress, checkpoint)
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
            raise self._disk_full(spec, fmt, role) from None
        except RuntimeError as e:  # OpenVINO reports a failed write as a RuntimeError
            if "No space left on device" not in str(e):
                raise
            raise self._disk_full(spec, fmt, role) from None
        return PreparedModel(path, reused, time.perf_counter() - start, fmt)

    def _prepare(self, spec: ModelSpec, fmt: Optional[str], role: str, progress: Progress,
                 checkpoint: Callable[[], None]) -> tuple[Path, bool]:
        if isinstance(spec, LocalSource):
            p = Path(spec.path).expanduser()
            if is_ir_folder(p):
                return p, True
            if not p.is_dir():
                raise DemoError(f"The {role} folder {p} does not exist; point `path` at an OpenVINO IR folder.")
            raise DemoError(
                f"The {role} folder {p} is not an OpenVINO IR folder (missing {', '.join(missing_ir_files(p))}); "
                "export it with optimum-cli export openvino."
            )
        if isinstance(spec, HubSource):
            cached = self._hub_snapshot(spec, local_only=True)
            if cached is not None:
                return cached, True
            return self._hub_snapshot(spec, local_only=False, role=role, progress=progress,
                                      checkpoint=checkpoint), False
        if isinstance(spec, ExportSource):
            return self._build(
                self.folder_for(spec), {"spec": spec.model_dump()}, role, progress, checkpoint,
                lambda work: fetchers.export_with_optimum(spec, work, role, progress, checkpoint),
            )
        return self._prepare_format(spec, fmt, role, progress, checkpoint)

    def _prepare_format(self, spec: PypiSource | GgufSource, fmt: str, role: str, progress: Progress,
                        checkpoint: Callable[[], None]) -> tuple[Path, bool]:
        """One format of a GGUF model, after the formats it is made from (each prepared once)."""
        final = self.folder_for(spec, fmt)
        if is_ready_folder(final):
            return final, True
        # No f16 folder yet: unpack in memory and compress in one child (no 3 GB written and read back).
        direct = fmt in formats.COMPRESSED and self.ready_path(spec, "f16") is None
        base_format = DEFAULT_FORMAT if direct else formats.derived_from(fmt)
        base = None
        if base_format is not None:
            base, _ = self._prepare_format(spec, base_format, role, progress, checkpoint)

        def make(work: Path) -> None:
            if fmt == DEFAULT_FORMAT:
                self._gguf_ir(spec, work, role, progress, checkpoint)
            elif fmt == "f16":
                stage = f"unpacking {role} GGUF weights to f16"
                progress(stage, 0, 0)
                formats.convert_in_child("f16", base, work, fmt, lambda done, total: progress(stage, done, total),
                                         checkpoint)
            else:
                stage = f"{'unpacking and ' if direct else ''}compressing {role} weights to {fmt} with NNCF"
                progress(stage, 0, 0)
                formats.convert_in_child("unpack+compress" if direct else "compress", base, work, fmt,
                                         lambda done, total: None, checkpoint)
                progress(stage, 1, 1)

        marker = {"spec": spec.model_copy(update={"format": fmt}).model_dump(), "format": fmt}
        if base is not None:
            marker["made_from"] = base.name
        return self._build(final, marker, role, progress, checkpoint, make, fmt)

    def _build(self, final: Path, marker: dict, role: str, progress: Progress, checkpoint: Callable[[], None],
               make: Callable[[Path], None], fmt: Optional[str] = None) -> tuple[Path, bool]:
        """Make `final` in a locked scratch folder and publish it, unless another prepare did already."""
        if is_ready_folder(final):
            return final, True
        what = role if fmt in (None, DEFAULT_FORMAT) else f"{role} ({fmt})"
        with self._target_lock(final, what, progress, checkpoint):
            if is_ready_folder(final):  # the prepare we waited for made it
                return final, True
            with Scratch(self.cache_dir) as scratch:
                checkpoint()
                make(scratch.path)
                missing = missing_ir_files(scratch.path)
                if missing:
                    raise DemoError(f"Preparing the {role} produced no {', '.join(missing)}; see the log above.")
                (scratch.path / READY_MARKER).write_text(
                    json.dumps({**marker, "prepared_at": time.time()}, indent=1)
                )
                checkpoint()  # the last moment a cancel keeps the cache as it was
                scratch.publish(final)
        return final, False

    @contextmanager
    def _target_lock(self, final: Path, what: str, progress: Progress,
                     checkpoint: Callable[[], None]) -> Iterator[None]:
        """Hold the flock of `final`; poll while another prepare holds it, so a cancel still works."""
        path = self.lock_path(final)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            started = time.monotonic()
            while not try_flock(fd):
                progress(f"waiting for another prepare of the {what}", time.monotonic() - started, 0)
                checkpoint()
                time.sleep(POLL_SECONDS)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _gguf_ir(self, spec: PypiSource | GgufSource, work: Path, role: str, progress: Progress,
                 checkpoint: Callable[[], None]) -> None:
        """The IR OpenVINO GenAI's GGUF reader makes, written into `work`."""
        if isinstance(spec, PypiSource):
            gguf_path = fetchers.assemble_pypi(spec, work, role, progress, checkpoint)
            if spec.requantize:
                gguf_path = fetchers.requantize(gguf_path, role, progress, checkpoint)
        else:
            src = Path(spec.path).expanduser()
            if not src.is_file():
                raise DemoError(f"The {role} GGUF file {src} does not exist; check `path` in models.yaml.")
            gguf_path = work / "model.gguf"
            os.symlink(src.resolve(), gguf_path)
        checkpoint()
        # gguf-py parses the whole header in Python (seconds for a 1.1 GB file): beside the
        # conversion, which runs in a child, not before it.
        reader = threading.Thread(target=fetchers.record_context_length, args=(gguf_path, work), daemon=True)
        reader.start()
        try:
            fetchers.gguf_to_ir(gguf_path, role, progress, checkpoint)
        finally:
            reader.join()
        gguf_path.unlink(missing_ok=True)  # the IR holds everything now; the GGUF would only double the disk use
        checkpoint()

    # -- a full disk --------------------------------------------------------------------
    def _disk_full(self, spec: ModelSpec, fmt: Optional[str], role: str) -> DemoError:
        if isinstance(spec, HubSource):
            from huggingface_hub import constants

            folder, env, name = Path(constants.HF_HUB_CACHE), "HF_HUB_CACHE", "the Hugging Face cache"
        else:
            folder, env, name = self.cache_dir, CACHE_ENV, "the model cache"
        need = self.space_needed(spec, fmt)
        amount = f"about {_size(need)}" if need else "several GB"
        # The folder goes to the operator's log only: this sentence may reach a visitor's page.
        logging.getLogger(__name__).warning("the disk filled up while preparing the %s in %s", role, folder)
        return DemoError(
            f"The disk filled up while preparing the {role}: it needs {amount} free in {name}; "
            f"free space there (or set {env} to a folder on a bigger disk) and retry."
        )

    def space_needed(self, spec: ModelSpec, fmt: Optional[str]) -> Optional[int]:
        """Rough bytes the formats of `spec` that are not ready yet take while they are made."""
        if isinstance(spec, PypiSource):
            gguf = spec.size
            # the assembled GGUF (and its Q4_0 rewrite) live beside the IR until it is written
            steps = {DEFAULT_FORMAT: gguf * (3 if spec.requantize else 2)}
        elif isinstance(spec, GgufSource):
            try:
                gguf = Path(spec.path).expanduser().stat().st_size
            except OSError:
                return None
            steps = {DEFAULT_FORMAT: gguf}
        else:
            return None
        # a GGUF holds ~4.5 bits a weight: f16 is ~3.6x its size, int8 ~1.8x, int4 ~1.1x
        steps.update(f16=4 * gguf, int8=2 * gguf, int4_sym=gguf * 6 // 5, int4_asym=gguf * 6 // 5, int4_channel=gguf)
        return sum(steps[f] for f in formats.chain(fmt) if self.ready_path(spec, f) is None) or None

    # -- pypi ---------------------------------------------------------------------------
    def locate_parts(self, spec: PypiSource) -> list[Path]:
        """Paths of every part, in order; DemoError naming the pip command if any is missing."""
        return fetchers.locate_parts(spec)

    # -- hub ----------------------------------------------------------------------------
    def _hub_snapshot(self, spec: HubSource, local_only: bool, role: str = "model",
                      progress: Progress = no_progress,
                      checkpoint: Callable[[], None] = lambda: None) -> Optional[Path]:
        """A ready IR repo from the Hub, kept in huggingface_hub's own cache.

        huggingface_hub downloads into `.incomplete` files and renames, so its cache is
        already atomic; HF_HUB_OFFLINE=1 is honoured by the library itself.
        """
        from huggingface_hub.errors import LocalEntryNotFoundError

        offline = local_only or fetchers.hub_offline()
        if not offline:
            progress(f"downloading {role} {spec.repo} from the Hugging Face Hub", 0, 0)
        try:
            path = fetchers.snapshot_download_in_child(spec.repo, spec.revision, offline, checkpoint)
        except LocalEntryNotFoundError:  # (a FileNotFoundError too: before OSError)
            if local_only:
                return None
            raise DemoError(
                f"The {role} {spec.repo} is not in the local Hugging Face cache and the Hub is offline; "
                "connect to a network and run `python -m demo.prepare` for this preset."
            ) from None
        except Exception as e:  # network errors, 404s, gated repos
            if isinstance(e, Cancelled) or getattr(e, "errno", None) == errno.ENOSPC:
                raise
            if local_only:
                return None
            raise self._hub_failed(spec, role, e) from None
        if not is_ir_folder(path):
            if local_only:
                return None
            raise DemoError(
                f"The Hub repo {spec.repo} is not an OpenVINO IR model (missing "
                f"{', '.join(missing_ir_files(path))}); use `source: export` for PyTorch repos."
            )
        return path

    @staticmethod
    def _hub_failed(spec: HubSource, role: str, e: Exception) -> DemoError:
        return DemoError(
            f"Could not download the {role} {spec.repo} from the Hugging Face Hub ({fetchers.failure_kind(e)}: "
            f"{str(e).splitlines()[0] if str(e) else 'no details'}); check the repo name and your network."
        )


def _size(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{max(1, round(n / 1e6))} MB"
