"""The main model alone, every plain configuration (weight format × attention backend) timed
in its real baseline pipeline, interleaved: what this machine does without a draft, the
baseline a visitor's speedup is read against (demo.calibrate.stages.measure_plain)."""

from __future__ import annotations

import threading
from typing import Callable, Optional, Sequence

from ..core.errors import DemoError
from ..models.calibration_result import backend_words, plain_key, split_plain_key
from ..models.folders import weight_bytes
from .measure import WARMUP_TOKENS, decode_tok_s


def plain_rates(folders: dict, prompts: Sequence[str], max_new_tokens: int, threads: Optional[int], rounds: int,
                send: Callable[[str], None] = lambda m: None, stop: Optional[threading.Event] = None,
                before_load: Callable[[str], None] = lambda fmt: None,
                reference: Optional[Callable[[], object]] = None, precision: str = "f32",
                attentions: Sequence[str] = ("PA",), skip: Sequence[str] = ()) -> dict:
    """Each main format's real baseline pipeline (the main model alone, the arena's own),
    timed INTERLEAVED: round by round, prompt by prompt, every format in turn (the order
    rotating), so the machine's drift hits every format alike and the rates can be paired.
    {"rates": {format: [decode tok/s per (round, prompt)]}, "interleaved": bool}: when the
    pipelines do not fit in memory together they are timed one after another instead, and
    `interleaved` says so. `before_load(format)` is called before each format is compiled.
    `reference()`, when given, makes an outside engine's runner (llama.cpp's plain decoding,
    demo.engine.llamacpp.LlamaCppSide) that joins the rotation as one more entry; its rates
    come back apart, {"reference": {name: [tok/s]}}, never a format to choose. `precision`: the
    activation precision the pipelines are built with (calibration's choice, precision.py).
    `attentions`: the backends each format runs on, keyed calibration_result.plain_key
    ("int4_sym+SDPA"), as `before_load` gets them; keys in `skip` are not timed."""
    import gc

    from ..core.memory import budget_bytes
    from ..core.settings import GenerationSettings, PipelineOptions
    from ..core.streaming import BASELINE
    from ..engine.pipelines import PairKey, build_side

    formats = [k for k in (plain_key(f, a) for f in folders for a in attentions) if k not in skip]
    sizes = {f: 2 * weight_bytes(folders[split_plain_key(f)[0]]) for f in formats}
    together = sum(sizes.values()) <= budget_bytes()
    settings = GenerationSettings(max_new_tokens=max_new_tokens)
    rates: dict = {f: [] for f in formats}

    def load(key: str):
        fmt, attention = split_plain_key(key)
        send(f"loading the main model alone ({fmt}{backend_words(attention)}) to time it")
        before_load(key)  # a native crash from here on is this configuration's (stages.announce)
        options = PipelineOptions(threads=threads, cpu_precision=precision, baseline_attention=attention)
        runner = build_side(PairKey(folders[fmt], None, "draft", options), BASELINE, lambda m: None, warmup=False)
        runner.run(prompts[0], GenerationSettings(max_new_tokens=WARMUP_TOKENS), lambda chunk: True)  # untimed
        return runner

    def time_once(runner, fmt: str, text: str) -> None:
        if stop is not None and stop.is_set():
            raise DemoError("Calibration was stopped; nothing was saved.")
        run = runner.run(text, settings, lambda chunk: True)
        rate = decode_tok_s(run.chunks)
        if run.error or rate is None:
            raise DemoError(f"The main model alone ({fmt}) failed while calibrating ({run.error or 'no steps'}); "
                            "check the prepared models.")
        rates[fmt].append(rate)

    from ..engine.llamacpp import SIDE as REFERENCE

    def load_reference():
        send(f"loading {REFERENCE} (no draft) to time it beside OpenVINO, as a reference")
        runner = reference()
        runner.run(prompts[0], GenerationSettings(max_new_tokens=WARMUP_TOKENS))  # untimed
        return runner

    if reference is not None:
        rates[REFERENCE] = []
    if together:
        runners = {f: load(f) for f in formats}
        if reference is not None:
            runners[REFERENCE] = load_reference()
        order = list(runners)
        try:
            send(f"timing the main model alone, every format in turn, {rounds} rounds")  # one line in the log
            for r in range(rounds):
                for text in prompts:
                    for fmt in order[r % len(order):] + order[:r % len(order)]:
                        time_once(runners[fmt], fmt, text)
        finally:
            runners.clear()
            gc.collect()
    else:
        for fmt in formats + ([REFERENCE] if reference is not None else []):
            runner = load_reference() if fmt == REFERENCE else load(fmt)
            try:
                for _ in range(rounds):
                    for text in prompts:
                        time_once(runner, fmt, text)
            finally:
                del runner
                gc.collect()
    out = {"rates": {f: r for f, r in rates.items() if f != REFERENCE}, "interleaved": together}
    if reference is not None:
        out["reference"] = {REFERENCE: rates[REFERENCE]}
    return out
