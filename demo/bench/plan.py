"""What the benchmark measures: modes, methods, one configuration, and the command line's lists.

A configuration is (weight formats, mode, method, assistant tokens K); demo.bench.measure runs
every one of them, the report, plot and page read these names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from ..core.errors import DemoError

MODES = ("fair", "race")
MODE_ALIASES = {"fair": "fair", "sequential": "fair", "race": "race"}  # "sequential": older name, older JSON
METHOD_LABELS = {"draft": "draft", "eagle3": "eagle3", "prompt_lookup": "lookup", "free_draft": "free-draft"}
# --method's spellings (the command line's dashes) -> the engine's method names
METHOD_OPTIONS = {"draft": "draft", "eagle3": "eagle3", "prompt-lookup": "prompt_lookup", "free-draft": "free_draft"}


def parse_methods(text: Optional[str]) -> Optional[list[str]]:
    """'free-draft,draft' -> ["free_draft", "draft"]."""
    if text is None:
        return None
    out = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        if item not in METHOD_OPTIONS:
            raise DemoError(f"--method takes {', '.join(METHOD_OPTIONS)} (comma-separated); got {item!r}.")
        out.append(METHOD_OPTIONS[item])
    if not out:
        raise DemoError("Give at least one method, e.g. --method free-draft.")
    return out


@dataclass(frozen=True)
class Config:
    """One measured configuration: how the sides run and what the speculative side guesses with."""

    mode: str              # fair | race
    method: str            # draft | eagle3 | prompt_lookup | free_draft
    assistant_tokens: int  # K
    weights: str = "preset"  # "MAIN/DRAFT" weight formats, or "preset" for models.yaml's

    def as_dict(self) -> dict:
        return {"mode": self.mode, "method": self.method, "assistant_tokens": self.assistant_tokens,
                "weights": self.weights}

    def label(self) -> str:
        return f"{self.weights} {self.mode} {METHOD_LABELS[self.method]} K={self.assistant_tokens}"


def parse_formats(text: Optional[str]) -> Optional[list[tuple[Optional[str], Optional[str]]]]:
    """'int8/gguf,f16/int8' -> [("int8", "gguf"), ("f16", "int8")] (main/draft weight formats)."""
    if text is None:
        return None
    from ..models.formats import FORMATS

    out = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        main, _, draft = item.partition("/")
        if main not in FORMATS or (draft and draft not in FORMATS):
            raise DemoError(f"Formats are MAIN/DRAFT pairs of {', '.join(FORMATS)}, e.g. int8/gguf (got {item!r}).")
        out.append((main, draft or None))
    if not out:
        raise DemoError("Give at least one MAIN/DRAFT format pair, e.g. f16/int8.")
    return out


def weights_label(formats: tuple) -> str:
    main, draft = formats
    return "preset" if main is None and draft is None else f"{main or 'preset'}/{draft or 'preset'}"


def normalize_modes(modes: Sequence[str]) -> list[str]:
    out = []
    for m in modes:
        if m not in MODE_ALIASES:
            raise DemoError(f"Unknown mode {m!r}; choose fair (or its old name, sequential) or race.")
        out.append(MODE_ALIASES[m])
    return list(dict.fromkeys(out)) or list(MODES)


def parse_ints(text: Optional[str]) -> Optional[list[int]]:
    if text is None:
        return None
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise DemoError(f"Assistant tokens are whole numbers separated by commas, e.g. 1,3,5,8 (got {text!r}).") from None
    if not values:
        raise DemoError("Give at least one number of assistant tokens, e.g. 1,3,5,8.")
    return values


def parse_tree(text: Optional[str]) -> Optional[tuple[int, int]]:
    """'2,3' -> (2, 3): an EAGLE-3 tree's branching factor and depth (None: a chain)."""
    if text is None:
        return None
    parts = [x.strip() for x in text.split(",")]
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise DemoError(f"--tree is a branching factor and a depth, two whole numbers, e.g. 2,3 (got {text!r}).")
    return int(parts[0]), int(parts[1])
