"""A calibration, typed (pydantic): what demo.calibrate measures and saves for this machine,
and what demo.models.calibration_store reads back (`format: auto`, K, "Why this speedup?").

The JSON form, as saved in the cache's calibration/ folder and written by
`python -m demo.calibrate --json` (seconds, bytes, tokens per second; "mode" is fair or race):

    Calibration
      calibration_version  the store's CALIBRATION_VERSION when it was measured; the store
                           reads back only its own version
      preset               the models.yaml preset measured
      fingerprint          Fingerprint: cpu, isa_flags, cores, memory_bytes, openvino (the
                           machine, demo.core.machine) and models {"main"|"draft": checksum}
      started_at           Unix time; duration_s: how long it took
      others_busy          [before, after]: other processes' share of the cores (None: unknown)
      k_max, prompts, max_new_tokens, prefix_tokens   what was measured: K up to k_max, on
                           `prompts` prompts answered to max_new_tokens, curves after a prefix
      plan                 "full" or "launch" (demo.calibrate.plan.Plan)
      acceptance_from      the main format whose answers acceptance was counted on, when not
                           every main format's (None: each its own)
      threads              {mode: threads per pipeline} (None: OpenVINO's default, all cores)
      race_curve_measured_at  the M a race curve was measured at; the others are interpolated
      cores, budget_bytes  the cores and the memory budget the choice had to fit
      main                 {format: MainFormat}: verify_s {mode: [one step of M = 1..k_max+1
                           tokens]}, memory_bytes, dominated (could not win: not measured
                           further), decode_step_s (a real decoding step, a check on M = 1),
                           fair_measured_at (a main skipped on its curve's ends: the M measured)
      draft                {format: DraftFormat}: step_s {mode: one token}, memory_bytes
      agreement_runs       {"MAIN/DRAFT": per prompt, per answer token, how many guesses in a
                           row from it the draft gets right}
      pipeline_overhead    {mode: Overhead}: a real pipeline's steps at a few K against the
                           model's ({"K": seconds}), the line a + b·K through them, and the
                           main model alone's step
      pipeline_overheads   {mode: {"MAIN/DRAFT": Overhead}}: every pair timed in a real
                           pipeline (the chosen pair always is; its Overhead is also
                           pipeline_overhead[mode]); absent before version 5
      candidates           [Candidate]: every (main, draft, mode, K) predicted
      choice               {mode: Candidate}: the one chosen
      fastest_alone        FastestAlone: the fastest main format without a draft (fair mode;
                           measured in a real pipeline since version 6, predicted before)
      plain                {mode: PlainTiming}: every usable main format's real baseline
                           pipeline, timed interleaved: {"rates": {format: [decode tok/s]},
                           "interleaved": bool, "reference": {"llama.cpp": [tok/s]} when
                           llama-cpp-python is installed (fair mode, the same GGUF, the same
                           rotation; a reference, never a format to choose); race mode
                           with one format left: its rates beside the chosen pair, "beside":
                           "MAIN/DRAFT" (no stage timed it alone)}
      baseline             {mode: FastestAlone}: the main format the arena's baseline runs in
                           that mode and its measured median rate: the fastest alone, or the
                           chosen pair's own main where the two tie within the spread (race
                           mode since version 7: its rate beside the chosen pair, as it races)
      quality              {main format: share of answer tokens where its greedy choice
                           agrees with the original GGUF's}; min_agreement: the bound below
                           which a format is never chosen
      precision            PrecisionChoice (since version 8): the activation precision every
                           CPU pipeline is built with (choice), the CPU plugin's own default,
                           and what was measured: the default's time over f32's for a
                           baseline token and a speculative step, per round and their
                           medians, on which main format (demo.calibrate.precision)
      skipped              sentences: configurations that crashed OpenVINO here, left out
      origin               Origin, when the choices came from a CPU class's profile
                           (demo.calibrate.profile) confirmed here; absent: measured here
      path                 where it was saved (in the result calibrate returns and in --json)

Older versions load as well (bench-results/ keeps versions 2 and 3): fields added since
take their defaults, and version 2's load_before (the load average before measuring) is
kept. to_dict gives back the keys a result was given, so a file reads and writes unchanged.
"""

from __future__ import annotations

import json
from statistics import median
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Fingerprint(_Model):
    """What the measurements depend on; a change in any of it means calibrating again."""

    cpu: Optional[str]
    # Since 2026-12-07 (older results lack them): /proc/cpuinfo's vendor_id, cpu family, model.
    cpu_vendor: Optional[str] = None
    cpu_family: Optional[int] = None
    cpu_model: Optional[int] = None
    isa_flags: list[str]
    cores: Optional[int]
    memory_bytes: Optional[int]
    openvino: Optional[str]
    models: dict[str, str]  # "main" | "draft" -> calibration_store.model_hash


class MainFormat(_Model):
    verify_s: dict[str, list[float]]  # mode -> one step of M = 1..k_max+1 tokens
    memory_bytes: int
    dominated: bool = False
    decode_step_s: Optional[float] = None
    # A main skipped on its curve's ends: the M measured; its fair curve is the line between.
    fair_measured_at: Optional[list[int]] = None


class DraftFormat(_Model):
    step_s: dict[str, float]  # mode -> one token
    memory_bytes: int


class Overhead(_Model):
    """A real pipeline of one mode against the standard model (demo.calibrate.measure.pipeline_overhead)."""

    main_format: str
    draft_format: str
    measured_step_s: dict[str, float]   # "K" -> a real speculative step
    predicted_step_s: dict[str, float]  # "K" -> the model's step
    extra_s: dict[str, float] = Field(default_factory=dict)  # "K" -> real minus model
    per_step_s: float    # a, of a + b·K: what every step adds
    per_guess_s: float   # b: what every guess adds
    baseline_step_s: float
    baseline_overhead_s: float  # the main model alone: a real token minus the model's
    # Since version 7, race mode: the baseline timed beside the speculative pipeline, as a race
    # runs them (demo.calibrate.beside): decode tok/s per run, and the share of the timing it decoded.
    baseline_rates: list[float] = Field(default_factory=list)
    beside_share: Optional[float] = None
    # "K" -> the speculative side's decode rate while timed (race mode: beside the baseline; fair
    # mode, since version 8: alone, the baseline timed in the stage before).
    speculative_tok_s: dict[str, float] = Field(default_factory=dict)


class Candidate(_Model):
    """One configuration, predicted (demo.calibrate.cost_model.predict)."""

    main_format: str
    draft_format: str
    mode: str
    k: int
    tokens_per_step: float
    step_s: float
    speculative_tok_s: float
    baseline_tok_s: float
    memory_bytes: int
    fits: bool  # within the memory budget

    def format_of(self, role: str) -> str:
        """The weight format of the "main" or the "draft" model."""
        return self.main_format if role == "main" else self.draft_format

    @property
    def speedup(self) -> float:
        return self.speculative_tok_s / self.baseline_tok_s


# A plain configuration's key in PlainTiming.rates: its weight format, and after it "+SDPA" for
# the main alone on OpenVINO GenAI's stateful backend (PipelineOptions.baseline_attention).
def plain_key(fmt: str, attention: str = "PA") -> str:
    return fmt if attention == "PA" else f"{fmt}+{attention}"


def split_plain_key(key: str) -> tuple[str, str]:
    """(weight format, attention backend) of a plain_key."""
    fmt, _, attention = key.partition("+")
    return fmt, attention or "PA"


def backend_words(attention: str) -> str:
    """What follows a main model's name for its attention backend: nothing for paged attention."""
    return "" if attention == "PA" else f" on the stateful backend ({attention})"


def plain_words(key: str) -> str:
    """A plain configuration in words: "int4_sym", "int4_sym on the stateful backend (SDPA)"."""
    fmt, attention = split_plain_key(key)
    return fmt + backend_words(attention)


class FastestAlone(_Model):
    main_format: str
    baseline_tok_s: float
    # Since version 9: the attention backend it ran on, "PA" (the scheduler's paged attention)
    # or "SDPA" (OpenVINO GenAI's stateful backend; PipelineOptions.baseline_attention).
    attention: str = "PA"


class PlainTiming(_Model):
    """Every main format's real baseline pipeline in one mode, timed interleaved (round by
    round, prompt by prompt, every format in turn): decode tok/s after the first token."""

    rates: dict[str, list[float]]
    interleaved: bool
    # Since version 6, when llama-cpp-python is installed (fair mode): an outside engine's
    # plain decoding of the same GGUF, timed in the same rotation: {"llama.cpp": [tok/s]}.
    reference: dict[str, list[float]] = Field(default_factory=dict)
    # Since version 7, race mode with one format left to run alone: no stage timed it alone; its
    # rates are those it ran at beside this "MAIN/DRAFT" speculative pipeline (Overhead.baseline_rates).
    beside: Optional[str] = None


class PrecisionChoice(_Model):
    choice: str
    reason: str
    default: Optional[str] = None
    measured_on: Optional[str] = None
    threads: Optional[int] = None
    baseline_ratio: Optional[float] = None
    speculative_ratio: Optional[float] = None
    baseline_ratios: list[float] = Field(default_factory=list)
    speculative_ratios: list[float] = Field(default_factory=list)


class Origin(_Model):
    """Where a calibration came from when it was not measured whole on this machine: a CPU
    class's profile (demo.calibrate.profile), confirmed here by timing the profile's fair
    baseline against its runner-up, interleaved."""

    profile: str       # the profile's file in demo/calibrate/profiles/
    source: str        # the calibration JSON it was written from
    measured_at: str   # the day that calibration ran
    mode: str
    chosen: str        # plain_key of the profile's baseline, and of the runner-up it was timed against
    runner_up: str
    ratios: list[float]  # this machine's paired samples, chosen / runner-up
    bar: float           # the median ratio that confirms (demo.calibrate.profile.CONFIRM_BAR)
    rates: dict[str, list[float]]
    confirmed: bool

    def median_ratio(self) -> float:
        return median(self.ratios)

    def words(self) -> str:
        """Where the choices come from, in a sentence for the page and the log."""
        read = (f"{plain_words(self.chosen)} ran {self.median_ratio():.2f}× {plain_words(self.runner_up)} "
                f"(median of {len(self.ratios)} paired samples)")
        if self.confirmed:
            return f"from this CPU class's profile (measured {self.measured_at}), confirmed here: {read}"
        return f"measured on this machine, which contradicted its CPU class's profile ({self.profile}): {read}"

    def short(self) -> str:
        if self.confirmed:
            return f"choices from this CPU class's profile, confirmed here in {len(self.ratios)} paired samples"
        return "choices measured on this machine (it contradicted its CPU class's profile)"


def origin_words(origin: Optional[Origin], short: bool = False) -> str:
    """Where a calibration's choices come from (its `origin`; None: measured here), for the
    page and the log; `short` for the Ready line."""
    if origin is None:
        return "choices measured on this machine" if short else "measured on this machine"
    return origin.short() if short else origin.words()


class Calibration(_Model):
    calibration_version: int
    preset: str
    fingerprint: Fingerprint
    started_at: float
    duration_s: float
    others_busy: Optional[list[Optional[float]]] = None
    load_before: Optional[float] = None  # version 2 only
    k_max: int
    plan: Optional[str] = None
    acceptance_from: Optional[str] = None
    prompts: int
    max_new_tokens: int
    prefix_tokens: int
    threads: dict[str, Optional[int]]
    race_curve_measured_at: Optional[list[int]] = None
    cores: int
    budget_bytes: int
    main: dict[str, MainFormat]
    draft: dict[str, DraftFormat]
    agreement_runs: dict[str, list[list[int]]]
    pipeline_overhead: dict[str, Overhead] = Field(default_factory=dict)
    pipeline_overheads: dict[str, dict[str, Overhead]] = Field(default_factory=dict)
    candidates: list[Candidate]
    choice: dict[str, Candidate]
    fastest_alone: FastestAlone
    # Since version 6. plain: {mode: PlainTiming}; baseline: {mode: what the arena's baseline
    # runs, measured}: the fastest main alone, or the chosen pair's own main where the two
    # cannot be told apart; quality: {main format: top-1 agreement with the original GGUF}.
    plain: dict[str, PlainTiming] = Field(default_factory=dict)
    baseline: dict[str, FastestAlone] = Field(default_factory=dict)
    quality: dict[str, float] = Field(default_factory=dict)
    min_agreement: Optional[float] = None
    precision: Optional[PrecisionChoice] = None  # since version 8; None: f32, the prior
    skipped: list[str] = Field(default_factory=list)
    origin: Optional[Origin] = None  # since 2026-12-07; None: measured whole on this machine
    path: Optional[str] = None

    def to_dict(self) -> dict:
        """The JSON form: the keys it was given, none added."""
        return self.model_dump(exclude_unset=True)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)
