"""EAGLE-3 on the real path, offline: a head for the SmolLM2 fixture, trained briefly and
exported by optimum-intel (lab.eagle3_fixture, built once per cache: about 2 minutes
the first time, then reused), raced by the engine, and recognised by OpenVINO GenAI itself.

The first EAGLE-3 generate of a process runs in a child (tests/eagle3_probe.py): a fresh
EAGLE-3 pipeline on CPU may crash there (openvino.genai issue 4425), and GenAI's own log line
is the independent witness that it took the EAGLE-3 path, not a classic draft's.
"""

import json
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest

from demo.cli import main as cli_main
from demo.core.errors import DemoError
from demo.core.settings import GenerationSettings, PipelineOptions
from demo.engine.pipelines import PipelineCache
from demo.models import eagle3
from tests.conftest import has_module, require

ROOT = Path(__file__).resolve().parent.parent
# Printed by OpenVINO GenAI (eagle3_model_transforms.cpp, share_vocabulary) only when it builds
# the EAGLE-3 pipeline: a classic draft never reaches that code.
GENAI_EAGLE3_LINE = "Copying embedding weights from main to draft model for eagle3 speculative decoding"


@pytest.fixture(scope="session")
def eagle3_pair(session_store, smollm2_ir):
    for module in ("torch", "optimum.intel", "einops"):
        require(has_module(module), f"{module} (pip install -r export-requirements.txt) to build the EAGLE-3 fixture")
    from lab.eagle3_fixture import build

    return build(session_store.cache_dir, smollm2_ir, log=lambda m: print(f"[eagle3 fixture] {m}", file=sys.stderr))


def probe(main: Path, head: Path, *args: int) -> tuple[dict, str]:
    env = {**os.environ, "OPENVINO_LOG_LEVEL": "3"}
    proc = subprocess.run([sys.executable, "-m", "tests.eagle3_probe", str(main), str(head), *map(str, args)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"the EAGLE-3 probe died ({proc.returncode}): {output[-2000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1]), output


def test_the_head_is_an_eagle3_head_and_the_main_names_its_layers(eagle3_pair):
    import openvino as ov

    assert eagle3.head_info(eagle3_pair.head) == eagle3.HeadInfo(hidden_layers=(2, 15, 27))
    head = ov.Core().read_model(eagle3_pair.head / "openvino_model.xml")
    assert head.get_rt_info("eagle3_mode").astype(str) == "True"  # OpenVINO's reading, not ours
    assert {i.get_any_name() for i in head.inputs} >= {"input_ids", "hidden_states"}
    assert "d2t" in {o.get_any_name() for o in head.outputs}
    names = {op.get_friendly_name() for op in ov.Core().read_model(eagle3_pair.main / "openvino_model.xml").get_ops()}
    for layer in (2, 15, 27):  # what GenAI searches for to export the main's hidden states
        assert any(f"layers.{layer}/" in n for n in names), layer
    assert not eagle3.is_head(eagle3_pair.main)


def test_an_eagle3_race_streams_accepts_and_is_eagle3_to_openvino(eagle3_pair):
    result, output = probe(eagle3_pair.main, eagle3_pair.head, 3)
    assert result["error"] is None
    assert GENAI_EAGLE3_LINE in output, "OpenVINO GenAI did not build an EAGLE-3 pipeline"
    # Streamed step by step, each chunk one verify step: accepted guesses + the main's own token.
    assert len(result["chunk_tokens"]) > 1 and result["baseline_chunks"] > 1
    assert sum(result["chunk_tokens"]) == result["generated"]
    assert result["steps"] == result["chunk_tokens"]
    # OpenVINO's counts: 3 guesses a step (none with the prompt's step, fewer at the token limit),
    # and the trained head gets some right.
    assert 3 * (len(result["steps"]) - 2) <= result["drafted"] <= 3 * len(result["steps"])
    assert 0 < result["accepted"] <= result["drafted"]
    # OpenVINO's accepted count leaves out the last step's (as for a classic draft, demo/cli.py)
    assert result["accepted"] == sum(n - 1 for n in result["steps"][:-1])
    assert result["text"].strip()


def test_tree_drafting_runs(eagle3_pair):
    result, output = probe(eagle3_pair.main, eagle3_pair.head, 4, 2, 2)
    assert result["error"] is None and GENAI_EAGLE3_LINE in output
    assert result["generated"] == sum(result["chunk_tokens"]) > 0
    assert result["accepted"] == sum(n - 1 for n in result["steps"][:-1]) > 0  # guesses taken from the tree


def test_method_and_head_must_agree(eagle3_pair, smollm2_ir):
    cache = PipelineCache()
    with pytest.raises(DemoError, match="holds an EAGLE-3 head"):
        cache.key(eagle3_pair.main, eagle3_pair.head, "draft", PipelineOptions())
    with pytest.raises(DemoError, match="is not an EAGLE-3 head"):
        cache.key(smollm2_ir, smollm2_ir, "eagle3", PipelineOptions())
    with pytest.raises(DemoError, match="has no EAGLE-3 head"):
        cache.key(smollm2_ir, None, "eagle3", PipelineOptions())
    key = cache.key(eagle3_pair.main, eagle3_pair.head, "eagle3", PipelineOptions())
    assert key.draft == str(eagle3_pair.head) and key.method == "eagle3"


@pytest.mark.parametrize("settings, words", [
    (dict(method="eagle3", assistant_tokens=None, confidence_threshold=0.4), "not a confidence threshold"),
    (dict(method="draft", branching_factor=2, tree_depth=2), "only with an EAGLE-3 head"),
    (dict(method="eagle3", branching_factor=2), "both a branching factor and a tree depth"),
    (dict(method="eagle3", branching_factor=0, tree_depth=2), "between 1 and 8"),
    (dict(method="eagle3", branching_factor=2, tree_depth=3, assistant_tokens=2), "at least 3"),
    (dict(method="eagle3", branching_factor=1, tree_depth=2, assistant_tokens=3), "holds only 2 guesses"),
    (dict(method="eagle3", branching_factor=2, tree_depth=2, sampling=True), "greedy only"),
])
def test_eagle3_settings_are_checked_with_one_sentence(settings, words):
    with pytest.raises(DemoError, match=words) as e:
        GenerationSettings(**settings).validated()
    assert str(e.value).count(". ") == 0 and str(e.value).endswith(".")


def test_a_valid_tree_passes():
    s = GenerationSettings(method="eagle3", assistant_tokens=5, branching_factor=2, tree_depth=3).validated()
    assert s.tree


def test_the_cli_says_what_to_give(capsys):
    assert cli_main(["--eagle3", "--preset", "smollm2-self-draft", "Hi"]) == 1
    assert "'smollm2-self-draft' has no EAGLE-3 head" in capsys.readouterr().err
    assert cli_main(["--eagle3", "/nonexistent", "Hi"]) == 1
    assert "MAIN_DIR HEAD_DIR PROMPT" in capsys.readouterr().err


# -- a preset's head: prepared by optimum-intel's EAGLE-3 export, the fixture's checkpoint
# standing in for AngelSlim's repository on the Hub ---------------------------------------

def test_an_eagle3_preset_exports_its_head_from_the_checkpoint(eagle3_pair, tmp_path):
    import openvino as ov

    from demo.models.presets import ExportSource
    from demo.models.sources import ModelStore

    spec = ExportSource(source="export", repo=str(eagle3_pair.checkpoint), eagle3=True, weight_format="fp16")
    said = []
    result = ModelStore(tmp_path / "cache").prepare(spec, role="draft model", progress=lambda m, *a: said.append(m))
    assert eagle3.head_info(result.path) == eagle3.HeadInfo(hidden_layers=(2, 15, 27))
    assert ov.Core().read_model(result.path / "openvino_model.xml").get_rt_info("eagle3_mode").astype(str) == "True"
    assert any("an EAGLE-3 head, with optimum-intel" in m for m in said)


@pytest.mark.parametrize("change, words", [
    ({"architectures": ["LlamaForCausalLM"]}, "is not an EAGLE-3 head (its config.json names LlamaForCausalLM"),
    ({"auto_map": {"AutoConfig": "evil.Config", "AutoModel": "x.Y"}}, "asks to run its own code (AutoConfig in auto_map)"),
    (None, "has no readable config.json"),
])
def test_a_checkpoint_that_is_no_head_or_runs_its_own_code_is_refused_before_optimum(eagle3_pair, tmp_path, change, words):
    from demo.models.presets import ExportSource
    from demo.models.sources import ModelStore

    fake = tmp_path / "ckpt"
    fake.mkdir()
    if change is not None:
        config = json.loads((eagle3_pair.checkpoint / "config.json").read_text())
        (fake / "config.json").write_text(json.dumps({**config, **change}))
    spec = ExportSource(source="export", repo=str(fake), eagle3=True)
    with pytest.raises(DemoError, match=re.escape(words)) as e:
        ModelStore(tmp_path / "cache").prepare(spec, role="draft model")
    assert "\n" not in str(e.value)


def test_a_hub_head_that_cannot_be_fetched_says_so(tmp_path, monkeypatch):
    from demo.models.presets import ExportSource
    from demo.models.sources import ModelStore

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for module in ("torch", "optimum.intel"):
        require(has_module(module), f"{module} (pip install -r export-requirements.txt)")
    spec = ExportSource(source="export", repo="AngelSlim/Qwen3-1.7B_eagle3", eagle3=True)
    with pytest.raises(DemoError, match=r"Could not get the draft model AngelSlim/Qwen3-1\.7B_eagle3 from the Hugging "
                                        r"Face Hub \(.*\); check the repository name and your network\."):
        ModelStore(tmp_path / "cache").prepare(spec, role="draft model")


def test_the_page_offers_eagle3_and_a_heads_preset_picks_it():
    from demo.models.presets import load_presets
    from demo.web.race_tab import METHODS, method_label

    presets = load_presets()
    assert METHODS["EAGLE-3 head"] == "eagle3"
    assert method_label(presets.get("qwen3-1.7b-eagle3")) == "EAGLE-3 head"
    assert method_label(presets.get("qwen3-1.7b-0.6b")) == "draft model"


def test_the_step_view_says_why_it_cannot_replay_a_head():
    from demo.engine import steps

    why = steps.why_not(GenerationSettings(method="eagle3", assistant_tokens=3), PipelineOptions())
    assert why and "EAGLE-3 head" in why and "hidden states" in why


def test_the_guard_proves_a_head_beside_its_main_and_sees_it_accept(eagle3_pair, tmp_path):
    """The native guard's check of an EAGLE-3 head (what a race on the page waits for): the
    head with its main in a child, drafting K=3 on a repetitive prompt; OpenVINO's own counts
    say it accepted guesses, and the verdict lets the pair be compiled here."""
    from demo.core.isolation import run
    from demo.engine.native_guard import WORKS, NativeConfig, NativeGuard, SafetyRecord

    result = run("demo.engine.native_guard:smoke_test", {"folder": str(eagle3_pair.head), "threads": 1,
                                                   "main": str(eagle3_pair.main)}, what="the EAGLE-3 check")
    assert 0 < result["accepted"] <= result["drafted"] and result["largest_step"] > 1
    guard = NativeGuard(SafetyRecord(tmp_path, machine_key="test"))
    head = NativeConfig(str(eagle3_pair.head), "draft", 1, main=str(eagle3_pair.main))
    guard.require([head])
    assert guard.record.get(head)["status"] == WORKS and guard.why_not(head) is None


def test_a_race_on_a_preset_whose_draft_is_a_head_runs_it_as_eagle3_through_the_arena(eagle3_pair, tmp_path):
    """What the page and the CLI's --preset do: a preset (local folders here) whose draft is a
    head races with the eagle3 method, the guard proving the pair in a child first, and the
    speculative side accepts guesses (OpenVINO's counts)."""
    from demo.core.streaming import SPECULATIVE, DoneEvent
    from demo.engine.arena import RaceRequest
    from demo.web.race_tab import method_label

    arena = fixture_arena(eagle3_pair, tmp_path)
    preset = arena.presets.get("fixture-eagle3")
    assert preset.drafts_with_eagle3 and method_label(preset) == "EAGLE-3 head"
    settings = GenerationSettings(max_new_tokens=16, method="eagle3", assistant_tokens=3)
    done = {e.side: e.result for e in arena.run(RaceRequest(prompt="Write a Python function that adds two numbers.",
                                                             preset="fixture-eagle3", settings=settings))
            if isinstance(e, DoneEvent)}
    assert all(r.error is None for r in done.values()), {s: r.error for s, r in done.items()}
    assert done[SPECULATIVE].ov_accepted_tokens > 0 and done[SPECULATIVE].ov_draft_tokens >= 3
    assert list((tmp_path / "cache" / "safety").glob("*.json")), "the guard recorded no verdict"


def test_the_pages_tree_sliders_race_a_tree_of_guesses(eagle3_pair, tmp_path):
    """The page's two tree sliders (0: a chain) become a tree request: parse_race_inputs with the
    values a browser sends, then the arena races it and the speculative side accepts guesses."""
    from demo.core.streaming import SPECULATIVE, DoneEvent
    from demo.web.race_tab import parse_race_inputs

    arena = fixture_arena(eagle3_pair, tmp_path)
    values = ["Write a Python function that adds two numbers.", "fixture-eagle3", "CPU", "CPU", "EAGLE-3 head", 4,
              False, 0.4, 16, False, 0.7, 0.9, False, "race: both at once"]
    chain = parse_race_inputs(arena, *values, 0, 0)
    assert chain.settings.method == "eagle3" and not chain.settings.tree
    request = parse_race_inputs(arena, *values, 2, 3)
    assert (request.settings.branching_factor, request.settings.tree_depth) == (2, 3)
    done = {e.side: e.result for e in arena.run(request) if isinstance(e, DoneEvent)}
    assert all(r.error is None for r in done.values()), {s: r.error for s, r in done.items()}
    assert done[SPECULATIVE].ov_accepted_tokens > 0


def fixture_arena(eagle3_pair, tmp_path):
    """An Arena whose one preset (local folders) is the fixture's main with its head as draft."""
    from demo.engine.arena import Arena

    models = tmp_path / "models.yaml"
    models.write_text(json.dumps({"default": "fixture-eagle3", "presets": {"fixture-eagle3": {
        "description": "the SmolLM2 fixture with its EAGLE-3 head", "license": "apache-2.0", "fixture": True,
        "main": {"source": "local", "path": str(eagle3_pair.main)},
        "draft": {"source": "local", "path": str(eagle3_pair.head)}, "assistant_tokens": 3}}}))
    return Arena.create(models, tmp_path / "cache")


def test_the_bench_measures_a_heads_preset_with_the_eagle3_method(eagle3_pair, tmp_path):
    from demo.bench import measure

    result = measure.run_bench("fixture-eagle3", modes=["race"], assistant_tokens=[3], repeat=1,
                               prompt_classes=["code"], limit_prompts=1, max_new_tokens=16,
                               arena=fixture_arena(eagle3_pair, tmp_path))
    assert not result.errors and len(result.samples) == 1
    sample = result.samples[0]
    assert sample.method == "eagle3" and sample.assistant_tokens == 3
    assert [a.method for a in result.aggregates] == ["eagle3"]
    assert result.aggregates[0].overall.tokens_per_step.median > 1.0  # the head's guesses were taken


def test_the_bench_measures_an_eagle3_tree_and_refuses_one_without_a_head(eagle3_pair, tmp_path):
    from demo.bench import measure
    from demo.bench.plan import parse_tree
    from demo.bench.report import format_table

    result = measure.run_bench("fixture-eagle3", modes=["fair"], assistant_tokens=[4], repeat=1, tree=parse_tree("2,2"),
                               prompt_classes=["code"], limit_prompts=1, max_new_tokens=16,
                               arena=fixture_arena(eagle3_pair, tmp_path))
    assert not result.errors and result.settings["tree"] == {"branching_factor": 2, "tree_depth": 2}
    assert result.samples[0].method == "eagle3" and result.aggregates[0].overall.tokens_per_step.median > 1.0
    assert "EAGLE-3 tree: branching factor 2, depth 2" in format_table(result)
    with pytest.raises(DemoError, match=r"Tree drafting \(--tree\) needs an EAGLE-3 head"):
        measure.run_bench("smollm2-self-draft", tree=(2, 2), cache_dir=tmp_path / "other")
    with pytest.raises(DemoError, match="at least 3, one guess per layer"):
        measure.run_bench("fixture-eagle3", modes=["fair"], assistant_tokens=[2], tree=(2, 3), repeat=1,
                          prompt_classes=["code"], limit_prompts=1, max_new_tokens=8,
                          arena=fixture_arena(eagle3_pair, tmp_path))
    with pytest.raises(DemoError, match="two whole numbers"):
        parse_tree("2")


def test_the_three_way_race_runs_a_heads_preset_with_eagle3_in_the_draft_lane(eagle3_pair, tmp_path):
    from demo.core.streaming import DoneEvent
    from demo.engine import three_way
    from demo.engine.arena import RaceRequest

    arena = fixture_arena(eagle3_pair, tmp_path)
    settings = GenerationSettings(max_new_tokens=12, assistant_tokens=3)
    done = {e.side: e.result for e in three_way.run(arena, RaceRequest(
        prompt="Write a Python function that adds two numbers.", preset="fixture-eagle3", settings=settings))
        if isinstance(e, DoneEvent)}
    assert list(done) == list(three_way.LANES) and all(r.error is None for r in done.values())
    assert done["draft"].ov_accepted_tokens > 0  # the head's guesses, taken by the main


def test_an_export_that_optimum_cannot_do_is_one_sentence(eagle3_pair, tmp_path):
    """A checkpoint that passes the checks but has no weights: optimum-intel's own failure,
    its last line, in one sentence naming the head."""
    from demo.models.presets import ExportSource
    from demo.models.sources import ModelStore

    broken = tmp_path / "no-weights"
    broken.mkdir()
    (broken / "config.json").write_text((eagle3_pair.checkpoint / "config.json").read_text())
    spec = ExportSource(source="export", repo=str(broken), eagle3=True)
    with pytest.raises(DemoError, match=r"^optimum-intel could not export the EAGLE-3 head no-weights: .+") as e:
        ModelStore(tmp_path / "cache").prepare(spec, role="draft model")
    assert "\n" not in str(e.value) and "Traceback" not in str(e.value)
