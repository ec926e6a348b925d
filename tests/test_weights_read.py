"""Bytes a decoding step reads (lab.weights_read), on tiny graphs and files built here
with known sizes: a lookup-only embedding table is left out, a tied one is read whole."""

import numpy as np
import pytest

from lab.weights_read import gguf_bytes_per_token, ir_bytes_per_token, memory_read_gb_s

VOCAB, HIDDEN = 4000, 300  # 1.2 MB as int8: above the size below which constants always count
RNG = np.random.default_rng(0)  # distinct values: save_model stores equal constants once


def _save_ir(folder, tied: bool, int8_table: bool = False):
    import openvino as ov
    from openvino import opset13 as ops

    ids = ops.parameter([1], ov.Type.i64, name="ids")
    if int8_table:  # the compressed form: int8 weights, converted and scaled before the lookup
        raw = ops.constant(RNG.integers(-9, 9, (VOCAB, HIDDEN), dtype=np.int8))
        table = ops.multiply(ops.convert(raw, ov.Type.f32), ops.constant(np.float32(0.5)))
    else:
        table = ops.constant(RNG.random((VOCAB, HIDDEN), dtype=np.float32))
    hidden = ops.gather(table, ids, ops.constant(np.int64(0)))
    head = table if tied else ops.constant(RNG.random((VOCAB, HIDDEN), dtype=np.float32))
    logits = ops.matmul(hidden, head, transpose_a=False, transpose_b=True)
    ov.save_model(ov.Model([logits], [ids]), str(folder / "openvino_model.xml"), compress_to_fp16=False)


@pytest.mark.parametrize("int8_table", [False, True])
def test_a_lookup_only_table_is_left_out_and_a_tied_one_counts(tmp_path, int8_table):
    table = VOCAB * HIDDEN * (1 if int8_table else 4)
    head = VOCAB * HIDDEN * 4
    (tmp_path / "untied").mkdir()
    _save_ir(tmp_path / "untied", tied=False, int8_table=int8_table)
    untied = ir_bytes_per_token(tmp_path / "untied")
    assert untied["lookup_only"] == table
    assert untied["per_token"] == untied["total"] - table and untied["per_token"] >= head
    # The whole .bin is the graph's constants: the total agrees with the file on disk.
    assert untied["total"] == pytest.approx((tmp_path / "untied" / "openvino_model.bin").stat().st_size, abs=64)
    (tmp_path / "tied").mkdir()
    _save_ir(tmp_path / "tied", tied=True, int8_table=int8_table)
    tied = ir_bytes_per_token(tmp_path / "tied")
    assert tied["lookup_only"] == 0 and tied["per_token"] == tied["total"] >= table


@pytest.mark.parametrize("has_output", [True, False])
def test_a_gguf_reads_token_embd_whole_only_without_an_output_layer(tmp_path, has_output):
    import gguf

    path = tmp_path / "m.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tensor("token_embd.weight", np.ones((VOCAB, HIDDEN), np.float32))
    writer.add_tensor("blk.0.ffn_up.weight", np.ones((HIDDEN, 64), np.float32))
    if has_output:
        writer.add_tensor("output.weight", np.ones((VOCAB, HIDDEN), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    got = gguf_bytes_per_token(path)
    table = VOCAB * HIDDEN * 4
    assert got["total"] == table * (2 if has_output else 1) + HIDDEN * 64 * 4
    assert got["lookup_only"] == (table if has_output else 0)


def test_memory_bandwidth_is_a_plausible_number():
    # Any machine this runs on reads faster than 0.5 GB/s and slower than 2 TB/s.
    assert 0.5 < memory_read_gb_s(threads=2, size_bytes=64 << 20, repeats=2) < 2000
