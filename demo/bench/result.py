"""The benchmark's JSON form, typed (pydantic): what `python -m demo.bench --json` and the
Benchmark tab write, and what load_result reads back, older files included.

    BenchResult   bench_version (1), started_at/finished_at (ISO, local time), duration_s,
                  machine, versions, preset (models.yaml's, folders by name only), settings,
                  weights ({"MAIN/DRAFT": formats and folders}), prompts, interrupted, and:
      configs     one ConfigRow per measured configuration: how it ran, threads, RSS loaded
      samples     one Sample per prompt × repeat: both Sides, paired speedup, verdict
      errors      one ErrorRow per configuration that failed to load or to warm up
      aggregates  one Aggregate per configuration: Group statistics (Stats: mean, sample std,
                  median, min, max, n) overall, per prompt class and per prompt

Older files still load: "sequential" (the old name of fair) reads as "fair", and a file
from before weight-format sweeps reads as weights "preset". run_bench builds the JSON form
and returns it validated as a BenchResult; to_dict gives that form back unchanged
(tests/test_bench.py checks a fresh one, failed and stopped runs included).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..core.errors import DemoError
from .plan import MODE_ALIASES


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class _Configured(_Model):
    """The configuration a row belongs to (plan.Config's fields)."""

    mode: str                # fair | race ("sequential" reads as fair)
    method: str              # draft | eagle3 | prompt_lookup
    assistant_tokens: int    # K
    weights: str = "preset"  # "MAIN/DRAFT" weight formats, or "preset"

    @field_validator("mode")
    @classmethod
    def _one_name(cls, value: str) -> str:
        return MODE_ALIASES.get(value, value)


class Stats(_Model):
    """describe() of one metric over the samples that have it."""

    mean: float
    std: float  # sample standard deviation (n-1); 0 for a single value
    median: float
    min: float
    max: float
    n: int


class Group(_Model):
    """Statistics of a set of samples (report._group_stats); None where no sample has the metric."""

    samples: int
    failed: int
    baseline_tokens_per_s: Optional[Stats]
    speculative_tokens_per_s: Optional[Stats]
    baseline_ttft_s: Optional[Stats]
    speculative_ttft_s: Optional[Stats]
    acceptance_rate: Optional[Stats]
    tokens_per_step: Optional[Stats]
    speedup: Optional[Stats]
    identical: int
    acceptance_by_position: Optional[dict] = None  # demo.core.acceptance's pooled curve (overall, classes)


class PromptGroup(Group):
    cls: str = Field(alias="class")


class Aggregate(_Configured):
    overall: Group
    classes: dict[str, Group]
    prompts: dict[str, PromptGroup]


class Side(_Model):
    """One side of one sample: our wall-clock numbers, then OpenVINO's own."""

    tokens: int
    elapsed_s: Optional[float]
    tokens_per_s: Optional[float]
    ttft_s: Optional[float]
    tpot_ms: Optional[float]
    steps: int                        # verify steps (demo.core.metrics: the prompt's step left out)
    tokens_per_step: Optional[float]  # τ over those steps, the main model's own token included
    ov_generated_tokens: Optional[int]
    ov_ttft_ms: Optional[float]
    ov_tpot_ms: Optional[float]
    error: Optional[str]


class SpeculativeSide(Side):
    accepted: Optional[int]           # OpenVINO's counts (None where it reports none)
    drafted: Optional[int]
    accepted_in_steps: Optional[int]  # counted from the chunks: step size - 1
    acceptance_by_position: Optional[dict] = None  # demo.core.acceptance's curve of this run


class Sample(_Configured):
    prompt_id: str
    cls: str = Field(alias="class")
    repeat: int
    baseline: Side
    speculative: SpeculativeSide
    acceptance_rate: Optional[float]
    speedup: Optional[float]  # paired: both sides of this repeat; None when a side failed
    verdict: str


class ConfigRow(_Configured):
    rss_loaded_bytes: Optional[int] = None  # the process with this pair loaded
    threads_per_pipeline: Optional[int]
    how: str


class ErrorRow(_Configured):
    stage: str              # load | warm-up
    errors: dict[str, str]  # side (or "pipelines") -> the sentence


class BenchResult(_Model):
    bench_version: int
    started_at: str
    finished_at: str
    duration_s: float
    machine: dict
    versions: dict
    preset: dict
    settings: dict
    weights: dict = Field(default_factory=dict)
    prompts: list[dict]
    configs: list[ConfigRow]
    samples: list[Sample]
    errors: list[ErrorRow]
    aggregates: list[Aggregate]
    interrupted: bool

    def to_dict(self) -> dict:
        """The JSON form: keys as they were given (none added), "class" by its name."""
        return self.model_dump(by_alias=True, exclude_unset=True)


def load_result(source: Union[Path, str, dict]) -> BenchResult:
    """A benchmark result from its JSON file (or the dict already read), older forms included."""
    try:
        data = source if isinstance(source, dict) else json.loads(Path(source).read_text())
        return BenchResult.model_validate(data)
    except (OSError, ValueError, ValidationError) as e:
        name = "this result" if isinstance(source, dict) else Path(source).name
        first = e.errors()[0] if isinstance(e, ValidationError) else None
        where = f" (at {'.'.join(str(p) for p in first['loc'])}: {first['msg']})" if first else ""
        raise DemoError(f"{name} is not a benchmark result{where}; pass a file python -m demo.bench --json wrote.") from None
