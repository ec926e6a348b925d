"""The main model for the own verify loop: one compiled stateful IR driven directly by
OpenVINO Runtime, with the same CPU properties the plain baseline's pipeline gets.

Two changes to the IR, both as OpenVINO GenAI makes them for its own pipelines:
* the logits are computed only for the rows asked for (a Gather before the LM head, GenAI's
  `apply_gather_before_matmul_transformation`): a prefill needs its last row, a verify all of
  its rows; computing the LM head for every prompt row would cost a 4,096-token prompt seconds;
* rejected guesses' KV rows are masked, not cut: they stay in the state and the attention
  mask gives them 0. Cutting them (GenAI's `trim_kv_cache`: read every state, slice, write it
  back) cost 13 ms more a step than the mask on a Zen 4 with the CPU plugin's default u8 KV cache
  (scripts/experiments/kv_trim_and_width.py), a third of a token's decode; a mask costs nothing.
  The holes are compacted (one real cut) only when they grow past HOLES_COMPACTED rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

ROWS = "logit_rows"  # the input the Gather reads: which rows get logits
# Masked rows still cost attention and memory: past this many, cut them out of the state.
HOLES_COMPACTED = 256


def _lm_head(model):
    """The MatMul that makes the logits, and the index of its hidden-state input."""
    result = next(r for r in model.get_results() if "logits" in r.input_value(0).get_names()
                  or "logits" in r.get_friendly_name())
    node = result.input_value(0).get_node()
    seen = 0
    while node.get_type_name() != "MatMul":
        seen += 1
        if seen > 16 or node.get_input_size() == 0:
            raise RuntimeError("no MatMul found before the logits: not a causal LM this loop can drive")
        node = node.input_value(0).get_node()
    for i in range(2):
        if node.input_value(i).get_partial_shape().rank.get_length() == 3:
            return node, i
    raise RuntimeError("the LM head's MatMul has no 3-D hidden-state input")


def with_row_selection(model):
    """`model` with a new input ROWS (i64, [n]): the logits are computed for those rows only."""
    import openvino as ov
    from openvino import opset13 as ops

    if any(ROWS in p.get_output_tensor(0).get_names() for p in model.get_parameters()):
        return model
    matmul, i = _lm_head(model)
    rows = ops.parameter(ov.PartialShape([-1]), ov.Type.i64, name=ROWS)
    rows.output(0).get_tensor().set_names({ROWS})
    hidden = matmul.input_value(i)
    gathered = ops.gather(hidden, rows, ops.constant(np.array(1, dtype=np.int64)))
    matmul.input(i).replace_source_output(gathered.output(0))
    model.add_parameters([rows])
    model.validate_nodes_and_infer_types()
    return model


class StatefulMain:
    """prefill(prompt) -> last row's logits; verify(tokens) -> logits of every row;
    keep(n) -> of the rows just verified, only the first n count from now on."""

    def __init__(self, folder: Path, properties: dict, device: str = "CPU", core=None):
        import openvino as ov

        core = core or ov.Core()
        model = with_row_selection(core.read_model(str(Path(folder) / "openvino_model.xml")))
        self.seq_axis = _sequence_axis(model)
        self.compiled = core.compile_model(model, device, properties)
        self.request = self.compiled.create_infer_request()
        self.reset()

    def reset(self) -> None:
        self.request.reset_state()
        self.mask = np.zeros(0, dtype=np.int64)  # one entry per row in the state: 1 kept, 0 masked
        self.past = 0      # tokens the sequence holds (kept rows)
        self.fed = 0       # rows the last verify added

    @property
    def holes(self) -> int:
        return int(self.mask.shape[0]) - self.past

    def _infer(self, ids: Sequence[int], rows: np.ndarray) -> np.ndarray:
        n = len(ids)
        self.mask = np.concatenate([self.mask, np.ones(n, dtype=np.int64)])
        inputs = {
            "input_ids": np.asarray(ids, dtype=np.int64)[None, :],
            "attention_mask": self.mask[None, :],
            "position_ids": np.arange(self.past, self.past + n, dtype=np.int64)[None, :],
            "beam_idx": np.zeros(1, dtype=np.int32),
            ROWS: rows,
        }
        out = self.request.infer(inputs)
        self.past += n
        self.fed = n
        return out["logits"][0]

    def prefill(self, ids: Sequence[int]) -> np.ndarray:
        self.reset()
        return self._infer(ids, np.array([len(ids) - 1], dtype=np.int64))[0]

    def verify(self, ids: Sequence[int]) -> np.ndarray:
        if self.holes > HOLES_COMPACTED:
            self._compact()
        return self._infer(ids, np.arange(len(ids), dtype=np.int64))

    def keep(self, n: int) -> None:
        """Of the rows the last verify added, only the first `n` count: mask the rest."""
        drop = self.fed - n
        if drop <= 0:
            return
        self.mask[len(self.mask) - drop:] = 0
        self.past -= drop
        self.fed = n

    def _compact(self) -> None:
        """Cut the masked rows out of every state (a copy of the whole KV cache: rare)."""
        kept = np.flatnonzero(self.mask)
        for state in self.request.query_state():
            data = state.state.data
            state.state = _tensor(np.ascontiguousarray(np.take(data, kept, axis=self.seq_axis)))
        self.mask = np.ones(len(kept), dtype=np.int64)

    def close(self) -> None:
        import gc

        del self.request, self.compiled
        gc.collect()


def _sequence_axis(model) -> int:
    """The KV states' sequence axis: the dynamic dimension after the batch ([batch, heads, seq, dim])."""
    shapes = [v.get_info().data_shape for v in model.get_variables()]
    if not shapes:
        raise RuntimeError("the model has no KV-cache state: export it stateful (optimum-cli's default)")
    dynamic = [i for i in range(1, shapes[0].rank.get_length()) if shapes[0][i].is_dynamic]
    if len(dynamic) != 1:
        raise RuntimeError(f"cannot tell the KV cache's sequence axis from its shape {shapes[0]}")
    return dynamic[0]


def _tensor(array: np.ndarray):
    import openvino as ov

    return ov.Tensor(array)
