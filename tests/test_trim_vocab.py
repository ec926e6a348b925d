"""scripts/experiments/trim_draft_vocab.py on the SmolLM2 fixture (u8 weights with zero points): the trimmed
head scores the kept ids exactly as before, never picks a dropped id, keeps the full-vocabulary
shape, and a speculative pipeline with it as draft still says what the main model says."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts" / "experiments"))

from demo.core.placement import EXACT_PROPERTIES  # noqa: E402

KEEP = 8192  # of SmolLM2's 49,152


@pytest.fixture(scope="module")
def trimmed(smollm2_ir, tmp_path_factory) -> Path:
    import trim_draft_vocab

    out = tmp_path_factory.mktemp("trimmed")
    info = trim_draft_vocab.trim_folder(smollm2_ir, out, KEEP)
    assert info["keep"] == KEEP and info["vocab"] == 49152
    return out


def _logits(folder: Path, ids: np.ndarray) -> np.ndarray:
    import openvino as ov

    props = {k: v for k, v in EXACT_PROPERTIES.items() if k != "KV_CACHE_PRECISION"}
    request = ov.Core().compile_model(str(folder / "openvino_model.xml"), "CPU", props).create_infer_request()
    n = ids.shape[1]
    inputs = {"input_ids": ids, "attention_mask": np.ones((1, n), np.int64),
              "position_ids": np.arange(n, dtype=np.int64)[None], "beam_idx": np.zeros(1, np.int32)}
    if any("sampled_tokens_indices" in i.get_names() for i in request.model_inputs):
        inputs["sampled_tokens_indices"] = np.zeros(1, np.int64)  # driven directly: row 0 is the batch
    out = request.infer(inputs)
    return np.array(out["logits"])


def test_kept_logits_are_unchanged(smollm2_ir, trimmed):
    import openvino_genai as og

    tok = og.Tokenizer(str(smollm2_ir))
    ids = tok.encode("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n").input_ids.data
    before, after = _logits(smollm2_ir, ids), _logits(trimmed, ids)
    kept = np.load(trimmed / "kept_ids.npy")
    assert after.shape == before.shape == (1, ids.shape[1], 49152)
    assert len(kept) == KEEP
    assert tok.get_eos_token_id() in kept
    np.testing.assert_allclose(after[..., kept], before[..., kept], rtol=1e-5, atol=1e-4)
    assert np.isin(after.argmax(-1), kept).all()
    assert np.delete(after, kept, axis=-1).max() < before.min()


def test_the_trimmed_head_scores_only_the_rows_the_pipeline_samples(trimmed):
    import openvino as ov

    model = ov.Core().read_model(str(trimmed / "openvino_model.xml"))
    [rows] = [p for p in model.get_parameters() if "sampled_tokens_indices" in p.output(0).get_names()]
    gather = next(iter(rows.output(0).get_target_inputs())).get_node()
    assert gather.get_type_name() == "Gather"
    # the rows are picked from the hidden states, before the (trimmed) lm_head MatMul
    assert any(t.get_node().get_type_name() == "MatMul" for t in gather.output(0).get_target_inputs())


def test_speculative_text_is_the_main_models(smollm2_ir, trimmed):
    import openvino_genai as og

    cfg = og.GenerationConfig()
    cfg.max_new_tokens = 24
    cfg.do_sample = False
    prompt = "Write a Python function that adds two numbers."

    def scheduler():
        s = og.SchedulerConfig()
        s.cache_size = 1
        return s

    alone = og.LLMPipeline(str(smollm2_ir), "CPU", scheduler_config=scheduler(), **EXACT_PROPERTIES)
    expected = alone.generate(prompt, cfg)
    del alone
    spec = og.LLMPipeline(str(smollm2_ir), "CPU", scheduler_config=scheduler(), **EXACT_PROPERTIES,
                          draft_model=og.draft_model(str(trimmed), "CPU", **EXACT_PROPERTIES))
    cfg.num_assistant_tokens = 4
    assert expected.strip()
    assert spec.generate(prompt, cfg) == expected



def test_keep_zero_keeps_the_ids_spelled_in_ascii(smollm2_ir):
    """--keep 0 reads the vocabulary's byte pieces; the tokenizer itself is the independent judge:
    a kept id decodes to printable ASCII (tabs and newlines too), and an id whose printable-ASCII
    text encodes back to that one id is kept (a piece with a stray non-ASCII byte decodes to
    fewer bytes, so it fails the round trip and is rightly dropped)."""
    import openvino_genai as og
    import trim_draft_vocab

    kept = set(trim_draft_vocab.choose_ids(smollm2_ir, 0, 49152).tolist())
    tok = og.Tokenizer(str(smollm2_ir))
    printable = set(map(chr, range(32, 127))) | {"\t", "\n", "\r"}
    round_trips = 0
    for i in range(0, 49152, 7):  # every seventh id: a spread sample, a few seconds
        text = tok.decode([i], skip_special_tokens=False)
        is_ascii = text != "" and set(text) <= printable
        if i in kept:
            assert is_ascii, (i, text)
        elif is_ascii:
            assert list(tok.encode(text, add_special_tokens=False).input_ids.data[0]) != [i], (i, text)
        round_trips += is_ascii
    assert round_trips > 1000 and 1000 < len(kept) < 49152
