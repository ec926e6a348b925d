"""OpenVINO GenAI pipelines: the baseline (main model alone) and the speculative one
(main model verifying guesses from a draft model, or from prompt lookup), built with one
scheduler config, warmed up, and kept in a byte-budgeted cache (PipelineCache). Running one
as a race's runner is openvino_runner.py's.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from ..core import placement
from ..core.errors import DemoError
from ..core.settings import FREE_DRAFT, METHOD_NAMES, GenerationSettings, PipelineOptions, uses_draft_model
from ..core.streaming import BASELINE, SIDES, SPECULATIVE
from ..models.folders import max_context, weight_bytes
from . import kv_capacity
from .openvino_runner import OpenVINORunner, check_fits, count_tokens, first_line, scheduler_config, template


def available_devices() -> list[str]:
    import openvino

    return list(openvino.Core().available_devices)


def check_device(device: str, role: str) -> None:
    devices = available_devices()
    if device not in devices:
        raise DemoError(f"The {role} device {device!r} is not available on this machine; "
                        f"choose one of: {', '.join(devices)}.")


@dataclass(frozen=True)
class PairKey:
    main: str
    draft: Optional[str]
    method: str
    options: PipelineOptions
    # The baseline side's main model when it runs other weights than the speculative side's
    # (this machine's fastest format without a draft); None: the same `main`.
    baseline_main: Optional[str] = None

    def folders(self) -> list[Path]:
        extra = [Path(self.baseline_main)] if self.baseline_main else []
        return [Path(self.main)] + ([Path(self.draft)] if self.draft else []) + extra

    def main_of(self, side: str) -> str:
        """The main model folder a side compiles."""
        return self.baseline_main if side == BASELINE and self.baseline_main else self.main


class PipelineCache:
    """Builds baseline + speculative runners lazily and keeps as many as memory allows.

    An entry is a pair (both sides, as a race needs them) or one side alone (fair mode on
    a pair that does not fit twice: each side is loaded in turn, see fair()).
    The budget is in bytes (demo.core.memory.budget_bytes: the machine's or the container's
    limit, less a reserve). An entry's size is measured when it loads (resident memory
    before and after, warm-up included) and remembered; one never loaded before is
    estimated from its weight files. Least recently used entries are evicted, and freed at
    once, to make room; one that cannot fit even alone is refused with a sentence instead
    of letting the kernel's OOM killer end the app.
    """

    def __init__(self, budget: Optional[int] = None, max_pairs: Optional[int] = None,
                 side_builder: Optional[Callable] = None, guard=None, pair_builder: Optional[Callable] = None):
        from ..core import memory

        self.budget = memory.budget_bytes() if budget is None else budget
        # (key, side, status) -> runner: one side alone; (key, status) -> {side: runner}: a pair.
        # In this process by default; the arena's visitors get each side in a child
        # (child_side.py), which the cache asks alive(), resident_bytes() and close().
        self._side_builder = side_builder or build_side
        self._pair_builder = pair_builder or build_pair
        self.max_pairs = max_pairs  # entries, whether pairs or single sides
        # A NativeGuard: nothing is compiled here that it has not proven on this CPU (None: the
        # caller proves; an Arena or a Serve replica sets its own).
        self.guard = guard
        self._pairs: "OrderedDict[tuple[PairKey, tuple], dict[str, OpenVINORunner]]" = OrderedDict()
        self._sizes: dict[tuple[PairKey, tuple], int] = {}  # measured bytes per loaded (or once loaded) entry
        self._in_turn: set[PairKey] = set()  # pairs that were loaded one side at a time
        self._lock = threading.Lock()

    @staticmethod
    def key(main: Path, draft: Optional[Path], method: str, options: PipelineOptions,
            baseline: Optional[Path] = None) -> PairKey:
        if method == "draft" and draft is None:
            raise DemoError("This preset has no draft model; choose prompt lookup as the speculative method.")
        if method == "eagle3" and draft is None:
            raise DemoError("This preset has no EAGLE-3 head; choose the draft model or prompt lookup as the "
                            "speculative method.")
        if uses_draft_model(method):
            check_head_matches(Path(draft), method)
        return PairKey(str(main), str(draft) if uses_draft_model(method) else None, method, options,
                       str(baseline) if baseline is not None and Path(baseline) != Path(main) else None)

    def loaded_bytes(self) -> int:
        return sum(self._sizes.get(k, 0) for k in self._pairs)

    def loaded(self) -> list[tuple[PairKey, tuple]]:
        """(pair key, sides) of every entry in memory now, least recently used first."""
        with self._lock:
            return list(self._pairs)

    def estimate(self, key: PairKey, sides: tuple = SIDES) -> int:
        """Bytes the given sides of a pair will take: measured if they were loaded before,
        else from their files.

        Each side compiles the main model (the speculative side the draft too), and the
        weight files are doubled, since the CPU plugin may expand f16 weights to f32 (docs/fairness.md,
        fair mode); plus the KV-cache pools.
        """
        if (key, sides) in self._sizes:
            return self._sizes[(key, sides)]
        main = weight_bytes(key.main)
        draft = weight_bytes(key.draft) if key.draft else 0
        per_side = {BASELINE: 2 * weight_bytes(key.main_of(BASELINE)), SPECULATIVE: 2 * (main + draft) + kv_pool_bytes(key)}
        return sum(per_side[side] for side in sides)

    def fits(self, key: PairKey, sides: tuple = SIDES) -> bool:
        """Whether these sides of a pair fit in the budget together (evicting everything else)."""
        return self.estimate(key, sides) <= self.budget

    def in_turn(self, key: PairKey) -> bool:
        """Whether a pair fits only one side at a time: both sides together exceed the
        budget, each alone does not. OpenVINO GenAI cannot run a speculative pipeline
        without drafting (a request with neither K nor a threshold gets K=5), so the fair
        mode cannot share one pipeline; loading in turn needs the same memory.

        Once a pair was found to load in turn it stays so: the sizes measured as its sides
        load differ from the estimate, and what the page says must be what really ran."""
        if key in self._in_turn:
            return True
        if not self.fits(key) and all(self.fits(key, (side,)) for side in SIDES):
            self._in_turn.add(key)
            return True
        return False

    def get(self, main: Path, draft: Optional[Path], method: str, options: PipelineOptions,
            status: Callable[[str], None] = lambda msg: None, baseline: Optional[Path] = None) -> dict[str, OpenVINORunner]:
        """Both sides of a pair, loaded together (`baseline`: the baseline's own main folder, if other)."""
        return self._get(self.key(main, draft, method, options, baseline), SIDES, status)

    def fair(self, main: Path, draft: Optional[Path], method: str, options: PipelineOptions,
             status: Callable[[str], None] = lambda msg: None, baseline: Optional[Path] = None) -> dict:
        """The runners of a fair measurement: both sides loaded, or, for a pair
        that fits only one side at a time, each side in turn (SideInTurn)."""
        key = self.key(main, draft, method, options, baseline)
        if self.in_turn(key):
            status("these models fit in memory one pipeline at a time: each side is loaded when it runs")
            return {side: SideInTurn(self, key, side) for side in SIDES}
        return self._get(key, SIDES, status)

    def get_side(self, key: PairKey, side: str, status: Callable[[str], None] = lambda msg: None) -> OpenVINORunner:
        """One side of a pair alone (the other side's entry is evicted if both do not fit)."""
        return self._get(key, (side,), status)[side]

    def _get(self, key: PairKey, sides: tuple, status: Callable[[str], None]) -> dict[str, OpenVINORunner]:
        from ..core import memory

        entry = (key, sides)
        with self._lock:
            if entry in self._pairs:
                self._pairs.move_to_end(entry)
                self._revive(key, self._pairs[entry], status)
                return self._pairs[entry]
            if len(sides) == 1 and (key, SIDES) in self._pairs:
                # One side of a loaded pair (a three-way lane after a fair run): the pair's own
                # pipeline, not a second compile that would evict it and be evicted in turn.
                self._pairs.move_to_end((key, SIDES))
                self._revive(key, self._pairs[(key, SIDES)], status)
                return {sides[0]: self._pairs[(key, SIDES)][sides[0]]}
            if self.guard is not None:  # every compile proven, whoever asks (race, fair, three-way, a replica)
                self.guard.require(native_configs(key, sides), status)
            need = self.estimate(key, sides)
            if need > self.budget:
                raise DemoError(
                    f"These models need about {memory.gb(need)} of memory and this machine allows "
                    f"{memory.gb(self.budget)}; choose a smaller preset or weight format."
                )
            while self._pairs and (self.loaded_bytes() + need > self.budget
                                   or (self.max_pairs and len(self._pairs) >= self.max_pairs)):
                self._evict_oldest()
            before = memory.rss_bytes()
            runners = (self._pair_builder(key, status) if sides == SIDES
                       else {sides[0]: self._side_builder(key, sides[0], status)})
            # The KV-cache pools are reserved at load but become resident only as runs
            # write to blocks they never used before, over hundreds of races: count them now.
            pools = kv_pool_bytes(key) if SPECULATIVE in sides else 0
            children = sum(getattr(r, "resident_bytes", lambda: 0)() for r in runners.values())
            self._sizes[entry] = max(memory.rss_bytes() - before + children, 1) + pools
            self._pairs[entry] = runners
            return runners

    def _revive(self, key: PairKey, runners: dict, status: Callable[[str], None]) -> None:
        """Load again a side whose child is gone (a Stop killed it mid-prompt, or it crashed)."""
        for side, runner in list(runners.items()):
            if not getattr(runner, "alive", lambda: True)():
                status(f"loading the {side} pipeline again (a Stop or a crash ended its last run)")
                runners[side] = self._side_builder(key, side, status)

    def _evict_oldest(self) -> None:
        import gc

        _, runners = self._pairs.popitem(last=False)
        for runner in runners.values():
            getattr(runner, "close", lambda: None)()  # a child side frees its memory by ending
        runners.clear()
        del runners
        gc.collect()  # OpenVINO frees a compiled model when its last Python reference goes

    def clear(self) -> None:
        with self._lock:
            while self._pairs:
                self._evict_oldest()


@functools.lru_cache(maxsize=8)
def shared_tokenizer(folder: str):
    """One tokenizer per model folder for every side's prompt checks in this process: each
    OpenVINO tokenizer keeps 4 native threads, and a side loaded again (after a Stop or a
    crash) would otherwise add 4 more each time. It is safe to share: OpenVINO GenAI's
    Tokenizer keeps a queue of infer requests for callers on several threads."""
    import openvino_genai

    return openvino_genai.Tokenizer(folder)


class PromptChecks:
    """A side's prompt checks without its pipeline: the tokenizer read from the main model's
    folder, as the pipeline itself reads it, and the limits its key gives."""

    def __init__(self, key: PairKey, side: str):
        self.key, self.side = key, side
        self.tokenizer = shared_tokenizer(str(key.main_of(side)))
        self.max_context = max_context(Path(key.main_of(side)))
        self.max_prompt = placement.max_prompt_tokens(key.options, key.method)
        self.kv_tokens = kv_capacity.side_capacity(key.main_of(side), key.draft, side, key.method, key.options)

    def template(self, prompt) -> str:
        return template(self.tokenizer, prompt)

    def count_tokens(self, text: str) -> int:
        return count_tokens(self.tokenizer, text)

    def check_prompt(self, prompt, settings: GenerationSettings) -> int:
        """Refuse a prompt that does not fit (DemoError); return its templated length in tokens."""
        tokens = self.count_tokens(self.template(prompt))
        check_fits(self.side, tokens, settings, self.max_context, self.max_prompt, self.kv_tokens)
        return tokens


class SideInTurn(PromptChecks):
    """One side of a fair measurement whose pair does not fit in memory twice: its pipeline
    is loaded (evicting the other side's) only when race.fair is about to run it (load)."""

    def __init__(self, cache: PipelineCache, key: PairKey, side: str):
        super().__init__(key, side)
        self.cache = cache

    def is_loaded(self) -> bool:
        return (self.key, (self.side,)) in self.cache.loaded()

    def load(self, status: Callable[[str], None] = lambda m: None) -> OpenVINORunner:
        return self.cache.get_side(self.key, self.side, status)


# What OpenVINO GenAI says when a main IR lacks the `layers.N/` nodes an EAGLE-3 head reads
# (speculative_decoding/eagle3_model_transforms.cpp).
EAGLE3_MAIN_ERRORS = ("Number of extracted hidden states does not match", "Failed to locate FC weights",
                      "eagle3_hidden_states_concat", "last_hidden_state")


def check_head_matches(draft: Path, method: str) -> None:
    """A draft folder's IR decides what OpenVINO GenAI runs (an EAGLE-3 head runs as EAGLE-3
    whatever was asked), so the method and the folder must agree, or a race would show one
    method under the other's name."""
    from ..models import eagle3

    if method == "eagle3":
        eagle3.require_head(draft)
    elif eagle3.is_head(draft):
        raise DemoError(f"The draft folder {draft.name} holds an EAGLE-3 head, which OpenVINO GenAI always runs as "
                        "EAGLE-3; choose the eagle3 method for it, or a classic draft model.")


def native_configs(key: PairKey, sides: tuple) -> list:
    """The model × thread count configurations these sides of a pair compile on the CPU."""
    from .native_guard import NativeConfig

    o, out, at = key.options, [], placement.cpu_precision(key.options)
    if placement.kind(o.main_device) == "CPU":  # the baseline may compile other weights (PairKey.main_of), or stateful
        sdpa = placement.baseline_stateful(o, key.method) and not placement.stateful(o, key.method)
        out += list(dict.fromkeys(NativeConfig(key.main_of(s), "main", o.threads, precision=at,
                                               attention="SDPA" if sdpa and s == BASELINE else "PA") for s in sides))
    if key.draft and SPECULATIVE in sides and placement.kind(o.draft_device) == "CPU":
        # an EAGLE-3 head is proven beside its main (native_guard.NativeConfig)
        out.append(NativeConfig(key.draft, "draft", o.threads, main=key.main if key.method == "eagle3" else None,
                                precision=at))
    return out


def kv_pool_bytes(key: PairKey) -> int:
    """The speculative pipeline's KV-cache pools: `cache_size_gb` for the main model and as much
    again for a draft's scheduler; long prompts fill both, and memory grows no further."""
    return (2 if key.draft else 1) * key.options.cache_size_gb * (1 << 30)


def _load_pipelines(key: PairKey, sides: tuple, status: Callable[[str], None]) -> dict:
    """The LLMPipelines of the given sides, loaded (not warmed up) with the key's options: every
    side with a scheduler from the same settings, each constructor with its own properties."""
    import openvino_genai as ov

    o = key.options
    placement.check_options(o)
    check_device(o.main_device, "main")
    if uses_draft_model(key.method) and SPECULATIVE in sides:
        check_device(o.draft_device, "draft")
    main_props = placement.pipeline_properties(o.main_device, o, key.method)
    baseline_props = placement.baseline_properties(o.main_device, o, key.method)
    if not placement.stateful(o, key.method):
        main_props["scheduler_config"] = scheduler_config(o)
    if not placement.baseline_stateful(o, key.method):
        baseline_props["scheduler_config"] = scheduler_config(o)
    pipes = {}
    try:
        if BASELINE in sides:
            status("loading the baseline pipeline (main model)")
            pipes[BASELINE] = ov.LLMPipeline(key.main_of(BASELINE), o.main_device, **baseline_props)
        if SPECULATIVE in sides and key.method != FREE_DRAFT:  # the own loop is built by _own_loop
            status(f"loading the speculative pipeline (main + {METHOD_NAMES[key.method]})")
            if uses_draft_model(key.method):  # an EAGLE-3 head too: GenAI knows it by its IR
                draft = ov.draft_model(key.draft, o.draft_device,
                                       **placement.draft_properties(o.draft_device, o, key.method))
                pipes[SPECULATIVE] = ov.LLMPipeline(key.main, o.main_device, draft_model=draft, **main_props)
            else:
                pipes[SPECULATIVE] = ov.LLMPipeline(key.main, o.main_device, prompt_lookup=True, **main_props)
    except MemoryError:  # std::bad_alloc while compiling: a sentence, not a stream that never ends
        raise DemoError("There was not enough memory to load these models; choose a smaller preset or weight "
                        "format.") from None
    except OSError as e:  # a model file unreadable (or gone) under the loader
        raise DemoError(f"OpenVINO could not read the model files ({type(e).__name__}); check the model folders "
                        "or prepare the preset again.") from None
    except RuntimeError as e:
        msg = first_line(e)
        if "Tokenizers for draft and main models are different" in str(e):
            raise DemoError("The draft model's tokenizer differs from the main model's; pick a draft from the same family.") from None
        if key.method == "eagle3" and any(s in str(e) for s in EAGLE3_MAIN_ERRORS):
            raise DemoError("The EAGLE-3 head cannot find the main model's hidden states in its IR; use a main model "
                            "exported with optimum-intel (an IR made from a GGUF names its layers otherwise).") from None
        raise DemoError(f"OpenVINO could not load the models ({msg}); check the model folders and devices.") from None
    return pipes


def build_pair(key: PairKey, status: Callable[[str], None]) -> dict[str, OpenVINORunner]:
    pipes = _load_pipelines(key, (BASELINE, SPECULATIVE), status)
    status("warming up both pipelines")
    # At once: a race gives each pipeline its share of the cores, so their first runs
    # (kernel compilation, mostly) overlap instead of queueing.
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {side: pool.submit(_runner, key, side, pipe) for side, pipe in pipes.items()}
        if key.method == FREE_DRAFT:
            futures[SPECULATIVE] = pool.submit(_own_loop, key, lambda m: None)
        return {side: future.result() for side, future in futures.items()}


def _own_loop(key: PairKey, status: Callable[[str], None], warmup: bool = True):
    """Free drafting's speculative side: the own verify loop over the baseline's own weights,
    so both sides' outputs agree."""
    from .verify_loop.runner import load_own_loop

    check_device(key.options.main_device, "main")
    status("loading the speculative side (the main model in the own verify loop)")
    main = Path(key.main_of(BASELINE))
    return load_own_loop(main, key.options, max_context(main), warmup)


def _runner(key: PairKey, side: str, pipe, warmup: bool = True) -> OpenVINORunner:
    return OpenVINORunner(side, pipe, warmup=warmup, max_context=max_context(Path(key.main_of(side))), method=key.method,
                          max_prompt=placement.max_prompt_tokens(key.options, key.method),
                          kv_tokens=kv_capacity.side_capacity(key.main_of(side), key.draft, side, key.method, key.options))


def build_side(key: PairKey, side: str, status: Callable[[str], None], warmup: bool = True) -> OpenVINORunner:
    """One side's pipeline alone, warmed up unless the caller's own first run is its warm-up:
    a cluster replica serves one side (demo.serve), calibration times one."""
    if side == SPECULATIVE and key.method == FREE_DRAFT:
        return _own_loop(key, status, warmup)
    pipe = _load_pipelines(key, (side,), status)[side]
    if warmup:
        status(f"warming up the {side} pipeline")
    return _runner(key, side, pipe, warmup)
