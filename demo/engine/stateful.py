"""One compiled stateful IR driven directly (no pipeline): the same kernels an LLMPipeline
runs, with nothing else on the clock. Calibration times it; the native smoke test runs it."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

# The input OpenVINO GenAI's continuous-batching runner fills with the rows it samples.
ROWS_INPUT = "sampled_tokens_indices"


def cpu_config(threads: Optional[int], precision: str = "f32") -> dict:
    """The CPU properties a pipeline with `threads` and activation `precision` gets, for a bare compile."""
    from ..core.placement import properties_for
    from ..core.settings import PipelineOptions

    return properties_for("CPU", PipelineOptions(threads=threads, cpu_precision=precision))


def step_inputs(ids, past: int) -> dict:
    """The inputs of a stateful causal LM that runs `ids` (1 × n) after `past` tokens in its state."""
    import numpy as np

    ids = np.asarray(ids, dtype=np.int64)
    n = ids.shape[1]
    return {
        "input_ids": ids,
        "attention_mask": np.ones((1, past + n), dtype=np.int64),
        "position_ids": np.arange(past, past + n, dtype=np.int64)[None, :],
        "beam_idx": np.zeros(1, dtype=np.int32),
    }


def _rss() -> int:
    from ..core.memory import rss_bytes

    return rss_bytes()


class StatefulModel:
    """One compiled stateful IR, driven directly (no pipeline): the same kernels an
    LLMPipeline runs, with nothing else on the clock."""

    def __init__(self, folder: Path, threads: Optional[int], precision: str = "f32"):
        import openvino as ov

        config = cpu_config(threads, precision)
        before = _rss()
        self.compiled = ov.Core().compile_model(str(folder / "openvino_model.xml"), "CPU", config)
        self.request = self.compiled.create_infer_request()
        # A vocabulary-trimmed draft (scripts/experiments/trim_draft_vocab.py) scores only the rows the pipeline
        # names; driven directly its rows are the batch, and row 0 is the whole sequence.
        self.rows = any(ROWS_INPUT in i.get_names() for i in self.compiled.inputs)
        self.request.reset_state()
        self.feed([[0]], 0)  # first inference allocates the state and the single-token kernels
        self.request.reset_state()
        self.memory = max(0, _rss() - before)

    def feed(self, ids, past: int):
        """Run `ids` (1 × n) after `past` tokens already in the state; the logits (1 × n × vocab)."""
        import numpy as np

        inputs = step_inputs(ids, past)
        if self.rows:
            inputs[ROWS_INPUT] = np.zeros(1, dtype=np.int64)
        out = self.request.infer(inputs)
        return out["logits"]

    def close(self) -> None:
        import gc

        del self.request, self.compiled
        gc.collect()
