"""Where each model runs and what each device is told: one place, pure (no OpenVINO import),
so the properties every constructor gets can be checked without the hardware.

A comparison is fair only if both sides are built alike: the same scheduler settings
(scheduler_settings), the same precision properties, and CPU threads split among the
pipelines that really compute on the CPU. A side on a GPU or NPU takes no CPU share and
gets no CPU-only property.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .errors import DemoError
from .settings import FREE_DRAFT, GenerationSettings, PipelineOptions, uses_draft_model
from .streaming import BASELINE, SIDES, SPECULATIVE

# Greedy outputs of the baseline and speculative pipelines match exactly only with all
# three: the multi-token verify step otherwise runs in lower precision with other kernels,
# and near-ties flip.
EXACT_PROPERTIES = {
    "INFERENCE_PRECISION_HINT": "f32",
    "KV_CACHE_PRECISION": "f32",
    "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0",
}
# Which exact-mode properties each device kind accepts. The NPU computes in f16 only.
EXACT_SUPPORT = {"CPU": tuple(EXACT_PROPERTIES), "GPU": tuple(EXACT_PROPERTIES), "NPU": ()}
# Activations on the CPU, for every pipeline and draft alike: PipelineOptions.cpu_precision,
# f32 unless calibration measured the plugin's own default faster on this machine
# (demo.calibrate.precision). The CPU plugin defaults to bf16 where the CPU has it (AMX,
# avx512_bf16), and for compressed weights that was the slow path on both Xeons: in f32 the
# plugin quantizes activations to int8 on the fly and runs integer kernels (int4_sym 1.5B main
# on the AMX Xeon: 72.7 -> 48.1 ms a token, 7-token verify 139 -> 69 ms; BENCHMARKS.md).
PRECISION_HINT = "INFERENCE_PRECISION_HINT"
CPU_ONLY_PROPERTIES = ("INFERENCE_NUM_THREADS", "ENABLE_CPU_PINNING")
# One sampler thread for every pipeline with a scheduler: OpenVINO GenAI's plain
# continuous-batching pipeline (the baseline) forces one, while a speculative pipeline's
# main and draft default to one per core, and those pools then take cores from inference
# (one thread: +12 % speculative tok/s on a 2-core AMX Xeon, BENCHMARKS.md).
SAMPLER_PROPERTIES = {"sampler_num_threads": 1}
# Any NPU in a speculative pair selects OpenVINO GenAI's stateful backend, which compiles
# for a fixed prompt length: prompts are checked against it, K only starts the adaptation.
NPU_MAX_PROMPT_TOKENS = 1024
NPU_MIN_RESPONSE_TOKENS = 256
# The baseline's attention backends (PipelineOptions.baseline_attention): paged attention
# under the scheduler, as the speculative side, or the stateful backend's SDPA.
BASELINE_ATTENTIONS = ("PA", "SDPA")


@dataclass(frozen=True)
class SchedulerSettings:
    """The continuous-batching scheduler every side of a comparison is built with.

    Prefix caching is off for all: with it on, a repeated prompt skips its prefill on
    whichever pipeline kept its cache, a free first token for one side only. 256 batched
    tokens with split-fuse is the library's own SchedulerConfig default."""

    cache_size_gb: int
    max_num_batched_tokens: int = 256
    dynamic_split_fuse: bool = True
    enable_prefix_caching: bool = False

    def describe(self) -> str:
        return (f"one scheduler for both sides ({self.cache_size_gb} GB KV cache, {self.max_num_batched_tokens} "
                f"batched tokens, prefix caching {'on' if self.enable_prefix_caching else 'off'})")


def scheduler_settings(options: PipelineOptions) -> SchedulerSettings:
    return SchedulerSettings(cache_size_gb=options.cache_size_gb)


def kind(device: str) -> str:
    """'CPU', 'GPU' or 'NPU' for a device name such as 'GPU.1'."""
    return device.split(".", 1)[0].split(":", 1)[0].upper()


def uses_npu(options: PipelineOptions, method: str = "draft") -> bool:
    return kind(options.main_device) == "NPU" or (uses_draft_model(method) and kind(options.draft_device) == "NPU")


def devices_of(side: str, options: PipelineOptions, method: str) -> list[str]:
    """The devices one side computes on: its main model's, and the draft's for a drafting side."""
    out = [options.main_device]
    if side == SPECULATIVE and uses_draft_model(method):
        out.append(options.draft_device)
    return out


def cpu_lanes(options: PipelineOptions, method: str, sides: tuple = SIDES) -> int:
    """How many of `sides` compute on the CPU at once (a speculative side's main and draft
    take turns, so they count once)."""
    return sum(any(kind(d) == "CPU" for d in devices_of(side, options, method)) for side in sides)


def split_threads(cores: int, options: PipelineOptions, method: str, sides: tuple = SIDES) -> Optional[int]:
    """Threads per CPU pipeline when `sides` run at once: the cores divided among the sides
    that use the CPU; None when none does."""
    lanes = cpu_lanes(options, method, sides)
    return max(1, cores // lanes) if lanes else None


def cpu_precision(options: PipelineOptions) -> str:
    """The activation precision CPU models are compiled with: f32 in exact mode, whatever was chosen."""
    return "f32" if options.exact else options.cpu_precision


def properties_for(device: str, options: PipelineOptions) -> dict:
    """What one constructor (pipeline or draft) placed on `device` is given."""
    k = kind(device)
    props: dict = {}
    if options.exact:
        props.update({name: EXACT_PROPERTIES[name] for name in EXACT_SUPPORT.get(k, ())})
    if k == "CPU":
        props[PRECISION_HINT] = cpu_precision(options)
    if k == "CPU" and options.threads is not None:
        # No pinning: with pinning both pipelines' threads land on the same cores.
        props.update({"INFERENCE_NUM_THREADS": options.threads, "ENABLE_CPU_PINNING": False})
    if k == "NPU":
        props.update({"MAX_PROMPT_LEN": NPU_MAX_PROMPT_TOKENS, "MIN_RESPONSE_LEN": NPU_MIN_RESPONSE_TOKENS})
    return props


def stateful(options: PipelineOptions, method: str) -> bool:
    """Whether the pair runs on OpenVINO GenAI's stateful backend (any NPU selects it for the
    speculative side). Then the baseline is made stateful too (ATTENTION_BACKEND=SDPA, no
    scheduler) so that neither side has a scheduler or a prefix cache the other lacks."""
    return uses_npu(options, method)


def pipeline_properties(device: str, options: PipelineOptions, method: str) -> dict:
    """An LLMPipeline's properties: its device's, plus the backend that keeps both sides alike."""
    props = properties_for(device, options)
    if not stateful(options, method):
        props.update(SAMPLER_PROPERTIES)
    elif kind(device) != "NPU":
        props["ATTENTION_BACKEND"] = "SDPA"
    return props


def baseline_stateful(options: PipelineOptions, method: str) -> bool:
    """Whether the baseline (the main model alone) runs on OpenVINO GenAI's stateful backend:
    beside an NPU pair (stateful), or on the CPU where calibration measured SDPA faster than
    paged attention without a draft. Exact mode keeps both sides on one backend: its point is
    the same tokens, and the two attention kernels round differently."""
    return stateful(options, method) or (
        kind(options.main_device) == "CPU" and options.baseline_attention == "SDPA" and not options.exact)


def baseline_properties(device: str, options: PipelineOptions, method: str) -> dict:
    """The baseline LLMPipeline's properties: the speculative side's main properties, or on
    the stateful backend its device's properties with ATTENTION_BACKEND=SDPA (no scheduler,
    so no sampler threads)."""
    if not baseline_stateful(options, method) or stateful(options, method):
        return pipeline_properties(device, options, method)
    return {**properties_for(device, options), "ATTENTION_BACKEND": "SDPA"}


def draft_properties(device: str, options: PipelineOptions, method: str) -> dict:
    """The draft model's properties: its device's, and one sampler thread beside a scheduler."""
    props = properties_for(device, options)
    if not stateful(options, method):
        props.update(SAMPLER_PROPERTIES)
    return props


def built_with(options: PipelineOptions, method: str) -> dict[str, tuple[str, dict]]:
    """Each role's device and the properties its constructor is given, exactly as the pipelines
    are built (pipeline_properties, draft_properties, baseline_properties): "main" (the
    LLMPipeline of both sides, the same properties), "baseline" where the baseline's differ
    (the stateful backend), for a drafting race "draft", for free drafting "own loop"."""
    roles = {"main": (options.main_device, pipeline_properties(options.main_device, options, method))}
    if baseline_properties(options.main_device, options, method) != roles["main"][1]:
        roles["baseline"] = (options.main_device, baseline_properties(options.main_device, options, method))
    if uses_draft_model(method):
        roles["draft"] = (options.draft_device, draft_properties(options.draft_device, options, method))
    if method == FREE_DRAFT:  # the speculative side is no LLMPipeline: the own loop's bare compile
        roles["own loop"] = (options.main_device, properties_for(options.main_device, options))
    return roles


def _precision(device: str, props: dict) -> str:
    hint = props.get("INFERENCE_PRECISION_HINT")
    words = [f"{hint} activations" if hint else f"{kind(device)}'s default precision"]
    if "KV_CACHE_PRECISION" in props:
        words.append(f"{props['KV_CACHE_PRECISION']} KV cache")
    if str(props.get("DYNAMIC_QUANTIZATION_GROUP_SIZE")) == "0":
        words.append("no dynamic quantization")
    return ", ".join(words)


def precision_words(options: PipelineOptions, method: str) -> str:
    """What each role was told about precision, in words, from built_with (so the page cannot
    say one thing while the constructors get another)."""
    by_precision: dict[str, list[str]] = {}
    for role, (device, props) in built_with(options, method).items():
        by_precision.setdefault(_precision(device, props), []).append(role)
    precision = "; ".join(f"{' and '.join(rs)}: {words}" for words, rs in by_precision.items())
    return f"{'exact mode, ' if options.exact else ''}precision {precision}"


def describe_built_with(options: PipelineOptions, method: str) -> str:
    """precision_words, then every property each role's constructor is given."""
    listed = "; ".join(f"{role} on {device} given "
                       + (", ".join(f"{k}={v}" for k, v in sorted(props.items())) or "no properties")
                       for role, (device, props) in built_with(options, method).items())
    return f"{precision_words(options, method)} ({listed})"


def check_options(options: PipelineOptions, settings: Optional[GenerationSettings] = None) -> None:
    """Refuse a device mapping that cannot give what the visitor asked for, in one sentence."""
    method = settings.method if settings else "draft"
    if options.baseline_attention not in BASELINE_ATTENTIONS:
        raise DemoError(f"The baseline's attention backend must be one of {', '.join(BASELINE_ATTENTIONS)}; "
                        "calibrate the preset again.")
    if not uses_npu(options, method):
        return
    if options.exact:
        raise DemoError("Exact mode needs f32 on every device and the NPU computes in f16; turn exact mode off "
                        "or place the main and draft models on CPU or GPU.")
    if settings is None:
        return
    if settings.method == "prompt_lookup":
        raise DemoError("Prompt lookup does not run on the NPU; choose the draft model or another main device.")
    if settings.confidence_threshold is not None:
        raise DemoError("With an NPU in the pair the draft cannot stop on a confidence threshold; "
                        "set a number of assistant tokens instead.")


def notes(options: PipelineOptions, method: str, sides: tuple = SIDES) -> list[str]:
    """Plain sentences on what this device mapping changes, for the page and the CLI."""
    out = []
    if uses_npu(options, method):
        out.append(f"NPU in the pair: OpenVINO GenAI's stateful speculative backend, where the number of "
                   f"assistant tokens is only a starting value (it adapts), there is no confidence threshold "
                   f"or prompt lookup, and prompts are limited to {NPU_MAX_PROMPT_TOKENS} tokens")
    if BASELINE in sides and baseline_stateful(options, method) and not stateful(options, method):
        out.append("the baseline runs OpenVINO GenAI's stateful backend (SDPA attention), this machine's fastest "
                   "without a draft; the speculative side needs the paged-attention scheduler, and the two "
                   "attention kernels round differently, so greedy answers may part after a while (exact mode "
                   "runs both on one backend)")
    off_cpu = [side for side in sides if cpu_lanes(options, method, (side,)) == 0]
    for side in off_cpu:
        out.append(f"the {side} side runs on {', '.join(devices_of(side, options, method))} and takes no CPU share")
    return out


def max_prompt_tokens(options: PipelineOptions, method: str) -> Optional[int]:
    return NPU_MAX_PROMPT_TOKENS if uses_npu(options, method) else None

