"""The Q4_0 rewrite of a GGUF (demo.models.gguf_rewrite) and the fast header reader it uses
(demo.models.gguf_header), judged by gguf-py: a small GGUF made with gguf-py's own writer,
rewritten, then read back by gguf-py's reader next to what gguf-py's writer makes of the same
tensors (the way the rewrite was done before)."""

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as Q  # noqa: E402

from demo.models.gguf_header import context_length, read_header  # noqa: E402
from demo.models.gguf_rewrite import TARGET, rewrite_as_q4_0  # noqa: E402


@pytest.fixture
def small_gguf(tmp_path):
    """Metadata like a real model's (a string array for a tokenizer, an architecture, a context
    length after them) and tensors the rewrite keeps (F32, Q4_0) and rewrites (Q8_0, Q5_0)."""
    rng = np.random.default_rng(0)
    path = tmp_path / "small.gguf"
    w = gguf.GGUFWriter(str(path), arch="qwen2")
    w.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(3000)])
    w.add_array("tokenizer.ggml.scores", [float(i) for i in range(3000)])
    w.add_string("general.name", "small")
    w.add_uint32("qwen2.context_length", 32768)
    w.add_tensor("norm.weight", rng.standard_normal(64).astype(np.float32))
    for name, qtype, shape in (("a.weight", Q.Q8_0, (96, 64)), ("b.weight", Q.Q5_0, (64, 128)),
                               ("c.weight", Q.Q4_0, (32, 64)), ("d.weight", Q.Q5_0, (3, 4, 64))):
        packed = gguf.quants.quantize(rng.standard_normal(shape).astype(np.float32), qtype)
        w.add_tensor(name, packed, raw_shape=packed.shape, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def by_gguf_py(src, dst):
    """The rewrite as gguf-py's own reader and writer do it."""
    reader = gguf.GGUFReader(str(src))
    writer = gguf.GGUFWriter(str(dst), arch=reader.fields["general.architecture"].contents())
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), field.types[0], sub_type=sub)
    for t in reader.tensors:
        if t.tensor_type in (Q.F32, Q.Q4_0):
            writer.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
        else:
            packed = gguf.quants.quantize(gguf.quants.dequantize(t.data, t.tensor_type), TARGET)
            writer.add_tensor(t.name, packed, raw_shape=packed.shape, raw_dtype=TARGET)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def no_gguf_py_parse(*args, **kwargs):
    pytest.fail("gguf-py parsed the whole header (13 s of Python for Qwen2.5's tokenizer)")


def test_the_rewrite_holds_what_gguf_pys_writer_makes(small_gguf, tmp_path, monkeypatch):
    steps = []
    with monkeypatch.context() as m:
        m.setattr(gguf, "GGUFReader", no_gguf_py_parse)
        assert rewrite_as_q4_0(small_gguf, tmp_path / "fast.gguf", lambda n, total: steps.append((n, total))) == 3
    assert steps == [(n, 5) for n in range(1, 6)]
    by_gguf_py(small_gguf, tmp_path / "reference.gguf")
    fast, reference = gguf.GGUFReader(str(tmp_path / "fast.gguf")), gguf.GGUFReader(str(tmp_path / "reference.gguf"))
    fields = {k: v.contents() for k, v in fast.fields.items() if not k.startswith("GGUF.")}
    assert fields == {k: v.contents() for k, v in reference.fields.items() if not k.startswith("GGUF.")}
    assert [(t.name, t.tensor_type, list(t.shape)) for t in fast.tensors] == \
        [(t.name, t.tensor_type, list(t.shape)) for t in reference.tensors]
    assert [t.tensor_type for t in fast.tensors] == [Q.F32, Q.Q4_0, Q.Q4_0, Q.Q4_0, Q.Q4_0]
    for a, b in zip(fast.tensors, reference.tensors):
        assert np.array_equal(a.data, b.data), a.name


def test_the_header_reader_agrees_with_gguf_py(small_gguf, tmp_path, monkeypatch):
    from demo.models import fetchers

    with monkeypatch.context() as m:
        m.setattr(gguf, "GGUFReader", no_gguf_py_parse)
        fetchers.record_context_length(small_gguf, tmp_path)  # what the prepare keeps beside the IR
    assert (tmp_path / fetchers.CONTEXT_FILE).read_text() == '{"context_length": 32768}'
    header, reader = read_header(small_gguf), gguf.GGUFReader(str(small_gguf))
    assert header.data_start == reader.data_offset and header.alignment == reader.alignment
    assert [(t.name, t.type, header.data_start + t.offset) for t in header.tensors] == \
        [(t.name, t.tensor_type.value, int(t.data_offset)) for t in reader.tensors]
    assert header.fields["general.name"] == "small"
    assert context_length(small_gguf) == 32768
