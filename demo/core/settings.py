"""Plain settings objects shared by the engine, the CLI, the bench and the page."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Literal, Optional

from .errors import DemoError

# draft: a classic draft model guesses; prompt_lookup: n-grams of the prompt guess; eagle3: an
# EAGLE-3 head guesses from the main model's own hidden states (demo/models/eagle3.py);
# free_draft: near-free guesses (n-grams of the prompt and answer, a datastore of code, the main
# model's own earlier predictions) verified by the arena's own loop on OpenVINO Runtime, not a
# GenAI pipeline (demo/engine/verify_loop).
Method = Literal["draft", "prompt_lookup", "eagle3", "free_draft"]
Mode = Literal["race", "fair"]
FREE_DRAFT = "free_draft"
METHOD_NAMES = {"draft": "draft model", "prompt_lookup": "prompt lookup", "eagle3": "EAGLE-3 head",
                "free_draft": "free drafting (own loop)"}
MAX_TREE = 8  # branching factor and tree depth: past this a tree is more guesses than a CPU can check


def uses_draft_model(method: str) -> bool:
    """Whether the method loads a second model through openvino_genai.draft_model() (a classic
    draft, or an EAGLE-3 head: the same call; GenAI tells them apart by the head's IR)."""
    return method in ("draft", "eagle3")

MAX_NEW_TOKENS_LIMIT = 2048
MAX_PROMPT_CHARS = 16_000
MAX_PROMPT_TOKENS = 4096
# One job's work, prompt tokens × new tokens: a 4,096-token prompt gets at most 512 new tokens,
# 2,048 new tokens a prompt of at most 1,024. The prefill cannot be stopped once it runs
# (RELIABILITY.md), so a stranger's longest job stays a few minutes on 2 cores, not a quarter hour.
JOB_TOKEN_BUDGET = 4096 * 512


@dataclass(frozen=True)
class GenerationSettings:
    """What a run asks of both pipelines (changing these needs no reload)."""

    max_new_tokens: int = 128
    method: Method = "draft"
    assistant_tokens: Optional[int] = 5              # K: guesses per main-model step
    confidence_threshold: Optional[float] = None     # instead of K: draft until it is unsure
    max_ngram_size: int = 3                          # prompt lookup: longest n-gram to match
    # EAGLE-3 tree drafting (both set, or neither for a chain of K guesses): the candidates kept
    # per tree node and layer, and the tree's layers; the K best-scored nodes are verified.
    branching_factor: Optional[int] = None
    tree_depth: Optional[int] = None
    sampling: bool = False                           # False = greedy
    temperature: float = 0.7
    top_p: float = 0.9
    seed: int = 42

    def validated(self) -> "GenerationSettings":
        if self.assistant_tokens is not None and self.confidence_threshold is not None:
            raise DemoError(
                "Set either the number of assistant tokens or the assistant confidence threshold, not both."
            )
        if self.assistant_tokens is None and self.confidence_threshold is None:
            raise DemoError("Set the number of assistant tokens (or a confidence threshold) for the speculative side.")
        if self.method == "prompt_lookup" and self.confidence_threshold is not None:
            raise DemoError("Prompt lookup needs a number of assistant tokens, not a confidence threshold.")
        if self.method == "free_draft" and self.confidence_threshold is not None:
            raise DemoError("Free drafting decides each step's guesses itself, up to the number of assistant tokens; "
                            "set that number, not a confidence threshold.")
        if self.method == "eagle3" and self.confidence_threshold is not None:
            raise DemoError("An EAGLE-3 head drafts a set number of tokens; set the number of assistant tokens, "
                            "not a confidence threshold.")
        if self.assistant_tokens is not None and not 1 <= self.assistant_tokens <= 32:
            raise DemoError("The number of assistant tokens must be between 1 and 32.")
        if self.confidence_threshold is not None and not 0.0 < self.confidence_threshold < 1.0:
            raise DemoError("The assistant confidence threshold must be between 0 and 1 (e.g. 0.4).")
        if not 1 <= self.max_new_tokens <= MAX_NEW_TOKENS_LIMIT:
            raise DemoError(f"Max new tokens must be between 1 and {MAX_NEW_TOKENS_LIMIT}.")
        if self.sampling and not (0.0 < self.temperature <= 2.0 and 0.0 < self.top_p <= 1.0):
            raise DemoError("With sampling on, temperature must be in (0, 2] and top-p in (0, 1].")
        self._check_tree()
        return self

    @property
    def tree(self) -> bool:
        return self.tree_depth is not None

    def _check_tree(self) -> None:
        b, d, k = self.branching_factor, self.tree_depth, self.assistant_tokens
        if b is None and d is None:
            return
        if self.method != "eagle3":
            raise DemoError("Tree drafting (branching factor and tree depth) works only with an EAGLE-3 head; "
                            "choose the eagle3 method or clear both.")
        if b is None or d is None:
            raise DemoError("Tree drafting needs both a branching factor and a tree depth; set both, or neither "
                            "for a chain of guesses.")
        if not (1 <= b <= MAX_TREE and 1 <= d <= MAX_TREE):
            raise DemoError(f"The branching factor and the tree depth must each be between 1 and {MAX_TREE}.")
        if self.sampling:
            raise DemoError("Tree drafting is greedy only; turn sampling off or clear the tree settings.")
        if k is None or k < d:
            raise DemoError(f"With a tree {d} layers deep the number of assistant tokens must be at least {d}, "
                            "one guess per layer.")
        if b * b * (d - 1) + b < k:  # OpenVINO GenAI's count of a tree's draft tokens
            raise DemoError(f"A tree with branching factor {b} and depth {d} holds only {b * b * (d - 1) + b} "
                            f"guesses, fewer than the {k} assistant tokens asked for; widen or deepen it, or lower K.")


@dataclass(frozen=True)
class PipelineOptions:
    """What the pipelines are compiled with (changing these builds new pipelines)."""

    main_device: str = "CPU"
    draft_device: str = "CPU"
    exact: bool = False          # f32 everywhere, so greedy outputs must match exactly
    threads: Optional[int] = None  # per pipeline; None = OpenVINO's default (all cores)
    cache_size_gb: int = 1       # KV cache of the continuous-batching scheduler
    # The activation precision every CPU model of the pair is told: f32 unless this machine's
    # calibration measured the CPU plugin's own default faster (demo.calibrate.precision).
    cpu_precision: str = "f32"
    # The attention backend of the main model alone on the CPU: "PA", the continuous-batching
    # scheduler with paged attention that a speculative side needs, or "SDPA", OpenVINO GenAI's
    # stateful backend, where this machine's calibration measured it faster without a draft
    # (only where clearly so: a Zen 5 ran it 0.97-1.14x, a tie; BENCHMARKS.md). Exact mode keeps PA on both sides.
    baseline_attention: str = "PA"

    def with_threads(self, threads: Optional[int]) -> "PipelineOptions":
        return replace(self, threads=threads)

    def with_precision(self, cpu_precision: str) -> "PipelineOptions":
        return replace(self, cpu_precision=cpu_precision)

    def with_baseline_attention(self, attention: str) -> "PipelineOptions":
        return replace(self, baseline_attention=attention)


def cpu_cores() -> int:
    """Cores this process may use (honours taskset/cgroup affinity, unlike os.cpu_count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def race_threads(cores: Optional[int] = None) -> int:
    """Threads per pipeline while the two race: an even split of the cores.

    OpenVINO's default gives each pipeline every core, so the two fight over them and the
    visible speedup shrinks; an even split keeps the race closest to the fair ratio.
    """
    return max(1, (cores or cpu_cores()) // 2)
