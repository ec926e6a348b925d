"""Experiment (issue 20, item 3: a cheaper draft without training): a draft whose output layer
scores only the N most useful token ids.

Qwen2.5-Coder-0.5B's lm_head is 151,936 x 896, about a quarter of the draft's weights, and it
is read in full for every drafted token. A draft only has to *guess*: the main model verifies
every guess, so a draft that can never propose a rare token loses a little acceptance and no
correctness. This tool rewrites a draft IR so that its head keeps N rows:

* which ids: byte-level BPE assigns ids in merge order, which tracks frequency, so the lowest
  ids are the common ones; to those we add every special token the tokenizer knows
  (<|im_end|>, <|endoftext|>, eos/bos/pad ...), and with --ids-from-prompts every id the draft
  itself emits (and reads) answering the benchmark prompts (demo/core/bench_prompts.py);
* the head: the MatMul that produces "logits" gets a new weight subgraph whose every per-row
  constant (int4/uint4 weights, scales, zero points) is sliced on the vocabulary axis with
  numpy, so the weights stay compressed (no Gather on a decompressed f16/f32 copy). The
  original constants are left alone: a tied input embedding keeps all its rows;
* the output: the trimmed logits [.., N] get one constant very negative column ([.., N+1]) and
  a constant Gather of length 151,936 maps them back (map[v] = position of v among the kept
  ids, N for a dropped id), so OpenVINO GenAI still sees [batch, seq, 151936] logits and a
  dropped id is never the draft's argmax.

    python scripts/experiments/trim_draft_vocab.py --draft DRAFT_IR --out DRAFT_IR-v32k --keep 32768
    python scripts/experiments/trim_draft_vocab.py --draft DRAFT_IR --out OUT --keep 32768 --ids-from-prompts
    python scripts/experiments/trim_draft_vocab.py --draft DRAFT_IR --out OUT --keep 0   # ASCII pieces

The sampled rows (openvino-genai 2026.4): the continuous-batching pipeline inserts a Gather of
the rows it samples ("sampled_tokens_indices") before the lm_head only when the Result hangs
directly off the MatMul (or off Add / Transpose / softcap Multiply). Here it hangs off our
remapping Gather, so the IR carries that input and Gather itself (the runner fills any model
input of that name); otherwise the draft would score every token it is fed.

Measured (BENCHMARKS.md): with f32 activations the trimmed draft is 8-12 % cheaper per step
driven alone but no faster inside the speculative pipeline, and guesses a little worse, so it
is an experiment, not a format.

The tokenizer/detokenizer IRs and the folder's JSON files are copied, so the new folder is a
drop-in draft. numpy and OpenVINO only (no torch).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

SAMPLED_ROWS = "sampled_tokens_indices"  # the input name OpenVINO GenAI's model runner looks for
DROPPED_LOGIT = -1e4  # far below any real logit, and finite in f16/bf16 (no inf - inf = NaN)
# Added/special tokens: <|im_end|>, <|fim_prefix|>, <tool_call>, </tool_call> ...
_SPECIAL = re.compile(r"<\|[^|<>]+\|>|</?[a-z_]+_call>|</?tool_[a-z_]+>")


def logits_matmul(model):
    """The MatMul whose output is the model's "logits" result (maybe behind a Convert)."""
    result = next((r for r in model.get_results() if "logits" in r.input_value(0).get_names()),
                  model.get_results()[0])
    node = result.input_value(0).get_node()
    while node.get_type_name() != "MatMul":
        if node.get_type_name() not in ("Convert",):
            raise ValueError(f"logits come from {node.get_type_name()}, not a MatMul")
        node = node.input_value(0).get_node()
    return result, node


def _slice_constant(const, axis: int, rows: np.ndarray):
    """A new Constant with `rows` taken on `axis` (0 or last) of `const`, packed types included."""
    import openvino as ov

    shape = list(const.get_shape())
    etype = const.get_element_type()
    raw = np.frombuffer(const.get_data().tobytes(), dtype=np.uint8)
    if axis == 0:
        per_row = raw.size // shape[0]
        if per_row * shape[0] != raw.size:
            raise ValueError(f"rows of {etype} {shape} are not whole bytes")
        new = raw.reshape(shape[0], per_row)[rows]
    else:  # unpacked types only (a packed last axis would split bytes)
        if etype.bitwidth < 8:
            raise ValueError(f"cannot slice the last axis of packed {etype}")
        new = const.get_data().take(rows, axis=axis)
    shape[axis] = len(rows)
    t = ov.Tensor(etype, ov.Shape(shape))
    t.data.reshape(-1)[:] = np.ascontiguousarray(new).view(t.data.dtype).reshape(-1)
    return ov.op.Constant(t, shared_memory=False)


def _rebuild_weight(output, vocab: int, rows: np.ndarray, memo: dict):
    """A copy of the weight subgraph feeding `output` with the vocabulary axis cut to `rows`.

    Handles what NNCF and the GGUF reader emit: Constant -> Convert -> (Subtract zero point)
    -> Multiply scale -> (Reshape) -> (Convert). A Constant with a dimension equal to the
    vocabulary (first or last axis) is sliced there; a Reshape target shape has its
    vocabulary entry replaced; a constant without the vocabulary (a scalar zero point) is
    shared with the original."""
    import openvino as ov
    import openvino.opset13 as ops

    node = output.get_node()
    key = (node.get_friendly_name(), output.get_index())
    if key in memo:
        return memo[key]
    kind = node.get_type_name()
    ins = [node.input_value(i) for i in range(node.get_input_size())]
    if kind == "Constant":
        shape = list(node.get_shape())
        if shape and shape[0] == vocab:
            out = _slice_constant(node, 0, rows).output(0)
        elif len(shape) > 1 and shape[-1] == vocab:
            out = _slice_constant(node, len(shape) - 1, rows).output(0)
        else:
            out = output
    elif kind == "Convert":
        out = ops.convert(_rebuild_weight(ins[0], vocab, rows, memo), node.get_destination_type()).output(0)
    elif kind in ("Subtract", "Multiply", "Add"):
        a, b = (_rebuild_weight(x, vocab, rows, memo) for x in ins)
        out = {"Subtract": ops.subtract, "Multiply": ops.multiply, "Add": ops.add}[kind](a, b).output(0)
    elif kind == "Reshape":
        target = ins[1].get_node()
        if target.get_type_name() != "Constant":
            raise ValueError("the head's Reshape has a computed target shape")
        dims = [len(rows) if d == vocab else d for d in target.get_data().tolist()]
        out = ops.reshape(_rebuild_weight(ins[0], vocab, rows, memo),
                          ops.constant(np.array(dims, dtype=np.int64)),
                          node.get_attributes().get("special_zero", False)).output(0)
    elif kind == "Transpose":
        out = ops.transpose(_rebuild_weight(ins[0], vocab, rows, memo), ins[1]).output(0)
    else:
        raise ValueError(f"unexpected {kind} ({node.get_friendly_name()}) in the lm_head weights")
    memo[key] = out
    return out


def trim_head(model, keep_ids: np.ndarray) -> int:
    """Rewrite `model` in place: its logits come from `keep_ids` rows only, mapped back to the
    full vocabulary. Returns the vocabulary size."""
    import openvino as ov
    import openvino.opset13 as ops

    result, matmul = logits_matmul(model)
    attrs = matmul.get_attributes()
    weight = matmul.input_value(1)
    wshape = weight.get_partial_shape().to_shape()
    vocab = int(wshape[0] if attrs["transpose_b"] else wshape[1])
    keep_ids = np.unique(np.asarray(keep_ids, dtype=np.int64))
    if keep_ids[0] < 0 or keep_ids[-1] >= vocab:
        raise ValueError("a kept id is outside the vocabulary")
    n = len(keep_ids)
    new_weight = _rebuild_weight(weight, vocab, keep_ids, {})
    # The rows to score, chosen by the pipeline: OpenVINO GenAI feeds this input whenever a
    # compiled model has it (continuous batching: the hidden states are [tokens, 1, hidden]
    # after its paged-attention rewrite, so the rows are axis 0). Its own insertion of the same
    # Gather cannot find our MatMul behind the remapping Gather, so without this the draft
    # would score every token it is fed. Driven directly (stateful, [1, tokens, hidden]),
    # indices [0] keep the whole sequence.
    indices = ops.parameter([-1], np.int64, name=SAMPLED_ROWS)
    indices.output(0).set_names({SAMPLED_ROWS})
    hidden = ops.gather(matmul.input_value(0), indices, ops.constant(np.int64(0)))
    trimmed = ops.matmul(hidden, new_weight, attrs["transpose_a"], attrs["transpose_b"])
    # [.., N] -> [.., N + 1] with a constant column: broadcast a [1, 1, 1] constant to [.., 1].
    lead = ops.shape_of(trimmed, "i64")
    col_shape = ops.concat([ops.gather(lead, ops.constant(np.array([0, 1], dtype=np.int64)),
                                       ops.constant(np.int64(0))),
                            ops.constant(np.array([1], dtype=np.int64))], 0)
    col = ops.broadcast(ops.constant(np.array([[[DROPPED_LOGIT]]], dtype=np.float32)), col_shape)
    col = ops.convert_like(col, trimmed)
    padded = ops.concat([trimmed, col], -1)
    index = np.full(vocab, n, dtype=np.int32)
    index[keep_ids] = np.arange(n, dtype=np.int32)
    full = ops.gather(padded, ops.constant(index), ops.constant(np.int64(-1)))
    # Whatever sat between the MatMul and the Result (a Convert) now follows the Gather.
    consumer = matmul.output(0)
    for target in list(consumer.get_target_inputs()):
        target.replace_source_output(full.output(0))
    names = consumer.get_names()
    consumer.set_names(set())
    full.output(0).set_names(names)
    model.add_parameters([indices])
    model.validate_nodes_and_infer_types()
    return vocab


def special_ids(folder: Path) -> set[int]:
    """Ids of the tokenizer's special/added tokens and of eos/bos/pad."""
    import openvino_genai as og

    tok = og.Tokenizer(str(folder))
    ids = {i for i in (tok.get_eos_token_id(), tok.get_bos_token_id(), tok.get_pad_token_id()) if i >= 0}
    for piece, i in tok.get_vocab().items():  # (get_vocab_vector fails on non-UTF-8 byte pieces)
        if isinstance(piece, bytes):
            piece = piece.decode("utf-8", "replace")
        if _SPECIAL.fullmatch(piece):
            ids.add(int(i))
    for name in ("generation_config.json", "config.json"):
        path = folder / name
        if path.exists():
            cfg = json.loads(path.read_text())
            for key in ("eos_token_id", "bos_token_id", "pad_token_id"):
                v = cfg.get(key)
                ids.update(v if isinstance(v, list) else [v] if isinstance(v, int) else [])
    return ids


def prompt_ids(folder: Path, max_new_tokens: int = 128) -> set[int]:
    """Every id the draft reads and emits answering the benchmark prompts greedily."""
    import openvino_genai as og

    from demo.core.bench_prompts import select
    from demo.core.bench_prompts import CLASSES

    pipe = og.LLMPipeline(str(folder), "CPU")
    tok = pipe.get_tokenizer()
    cfg = og.GenerationConfig()
    cfg.max_new_tokens = max_new_tokens
    cfg.do_sample = False
    seen: set[int] = set()
    for p in select(list(CLASSES), 100):
        text = tok.apply_chat_template([{"role": "user", "content": p.text}], add_generation_prompt=True)
        enc = tok.encode(text)
        seen.update(int(i) for i in enc.input_ids.data.reshape(-1))
        res = pipe.generate(enc, cfg)
        seen.update(int(i) for i in np.asarray(res.tokens).reshape(-1))
    return seen


def ascii_ids(folder: Path) -> set[int]:
    """Ids whose piece is spelled in printable ASCII (tabs and newlines too): English and code,
    a rule that needs no corpus (and no benchmark prompt). 94,619 of Qwen2.5's 151,936."""
    import openvino_genai as og

    return {int(i) for piece, i in og.Tokenizer(str(folder)).get_vocab().items()
            if isinstance(piece, bytes) and all(32 <= b < 127 or b in (9, 10, 13) for b in piece)}


def choose_ids(folder: Path, keep: int, vocab: int, from_prompts: bool = False) -> np.ndarray:
    """`keep` ids: the specials, then (optionally) the prompts' ids, then the lowest ids.
    keep 0: the specials and every ASCII piece (ascii_ids), however many that is."""
    must = special_ids(folder)
    if keep == 0:
        return np.array(sorted(i for i in must | ascii_ids(folder) if 0 <= i < vocab), dtype=np.int64)
    if from_prompts:
        must |= prompt_ids(folder)
    must = {i for i in must if 0 <= i < vocab}
    if len(must) > keep:
        raise ValueError(f"{len(must)} ids must be kept, more than --keep {keep}")
    chosen = set(must)
    for i in range(vocab):
        if len(chosen) >= keep:
            break
        chosen.add(i)
    return np.array(sorted(chosen), dtype=np.int64)


def trim_folder(draft: Path, out: Path, keep: int, from_prompts: bool = False) -> dict:
    import openvino as ov

    model = ov.Core().read_model(str(draft / "openvino_model.xml"))
    _, matmul = logits_matmul(model)
    wshape = matmul.input_value(1).get_partial_shape().to_shape()
    vocab = int(wshape[0] if matmul.get_attributes()["transpose_b"] else wshape[1])
    ids = choose_ids(draft, keep, vocab, from_prompts)
    trim_head(model, ids)
    out.mkdir(parents=True, exist_ok=True)
    ov.save_model(model, str(out / "openvino_model.xml"), compress_to_fp16=False)
    for f in draft.iterdir():
        if f.is_file() and (f.name.startswith(("openvino_tokenizer", "openvino_detokenizer")) or
                            (f.suffix == ".json" and not f.name.startswith("."))):
            shutil.copy2(f, out / f.name)
    info = {"made_from": str(draft), "keep": len(ids), "vocab": vocab, "ids_from_prompts": from_prompts,
            "highest_low_id": int(max(i for i in range(len(ids)) if ids[i] == i)) if ids[0] == 0 else -1}
    (out / "trim_vocab.json").write_text(json.dumps(info, indent=1))
    np.save(out / "kept_ids.npy", ids)
    return info


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draft", required=True, type=Path, help="draft IR folder")
    ap.add_argument("--out", required=True, type=Path, help="new IR folder")
    ap.add_argument("--keep", required=True, type=int,
                    help="token ids to keep in the head; 0: every id spelled in ASCII, and the specials")
    ap.add_argument("--ids-from-prompts", action="store_true",
                    help="also keep every id the draft reads/emits on the benchmark prompts")
    args = ap.parse_args()
    print(json.dumps(trim_folder(args.draft, args.out, args.keep, args.ids_from_prompts)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
