"""Calibration's measurements on this machine: the cost of a main-model step of M tokens,
a draft step, the main model's greedy answers and the draft's guesses along them, and what a
real pipeline adds to each step. These run in the stage children (demo.calibrate.stages);
the arithmetic that turns them into predictions is demo.calibrate.cost_model.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from ..core.errors import DemoError
from ..engine.stateful import StatefulModel
from ..models.formats import COARSE
from .cost_model import fit_overhead

PREFIX_TOKENS = 100
# The weights as shipped: every other format is re-quantized from them, and its quality is
# read against them (top-1 agreement along the same answers, agreement below).
REFERENCE_FORMAT = "gguf"
# A main format whose greedy choices agree with the original weights' on fewer tokens than
# this is never chosen: a faster answer that is a worse answer is no gain.
MIN_AGREEMENT = 0.90
REPEATS = 5
# A draft step is short and each speculative step pays K of them, so its noise moves K (BENCHMARKS.md):
# rounds of DRAFT_BLOCK steps each, the draft formats in turn (interleaved_step_costs).
DRAFT_REPEATS = 20
DRAFT_BLOCK = 4
# A real pipeline's steps are timed for at least this long per K (production prompts take
# longer than that in one round; the test fixture's short answers repeat).
OVERHEAD_MIN_S = 2.0
OPTIMISM = 0.15  # end_costs' guess of a curve from its ends errs this far on the cheap side
OVERHEAD_MAX_ROUNDS = 10
WARMUP_TOKENS = 8  # the untimed first run of a pipeline being timed: a few steps at the first K


def step_costs(model: StatefulModel, ms: Sequence[int], repeats: int = REPEATS) -> list[float]:
    """Seconds of one forward step of M new tokens after a prefix of PREFIX_TOKENS or a few
    more, for each M in `ms` (a list in that order): the fastest of `repeats` rounds.

    The prefix is fed once; each round then steps every M in a shuffled order, each M
    twice in a row and only the second timed: a pipeline repeats one shape step after
    step (K+1 tokens to verify, 1 to decode), and the CPU plugin's first step after a
    change of shape costs more. The past grows by 2·sum(ms) tokens a round, which barely
    moves the cost (feeding the prefix again each round cost more than the timed steps
    of a draft). Rounds go over all M in turn, so a burst of other work on a shared box
    spoils one sample of every M, not every sample of one M.
    """
    import numpy as np

    rng = np.random.default_rng(0)
    prefix = rng.integers(100, 5000, size=(1, PREFIX_TOKENS))
    inputs = {m: rng.integers(100, 5000, size=(1, m)) for m in ms}
    best = {m: float("inf") for m in ms}
    model.request.reset_state()
    model.feed(prefix, 0)
    past = PREFIX_TOKENS
    for round_ in range(repeats + 1):  # round 0 compiles each new shape's kernels: dropped
        for m in rng.permutation(list(ms)).tolist():
            model.feed(inputs[m], past)
            t0 = time.perf_counter()
            model.feed(inputs[m], past + m)
            elapsed = time.perf_counter() - t0
            past += 2 * m
            # The minimum, not the median: on a shared box other work only ever adds time.
            if round_:
                best[m] = min(best[m], elapsed)
    return [best[m] for m in ms]


def interleaved_step_costs(models: dict, rounds: int, block: int = DRAFT_BLOCK,
                           before: Callable[[str], None] = lambda name: None) -> dict:
    """{name: seconds of one single-token step}: interleaved_costs at M = 1, the median of a
    model's rounds, so it does not rest on one lucky or unlucky moment."""
    import numpy as np

    rounds_of = interleaved_costs(models, (1,), rounds, block, before)
    return {name: float(np.median(by_m[1])) for name, by_m in rounds_of.items()}


def interleaved_costs(models: dict, ms: Sequence[int], rounds: int, block: int = DRAFT_BLOCK,
                      before: Callable[[str], None] = lambda name: None) -> dict:
    """{name: {M: [seconds of one step of M tokens, per round]}} for several compiled models,
    measured in turn: each is fed a prefix of PREFIX_TOKENS once; then every round runs a block
    of `block` steps of each M for each model (the order rotating) and keeps the block's fastest.
    Drift on a shared box lasts seconds, longer than one model's steps: in turn, every model sees
    the same drift, and rounds pair. `before(name)` runs before each block (the stage announces
    the configuration about to run)."""
    import numpy as np

    rng = np.random.default_rng(0)
    prefix = rng.integers(100, 5000, size=(1, PREFIX_TOKENS))
    inputs = {m: rng.integers(100, 5000, size=(1, m)) for m in ms}
    names, past = list(models), {}
    best: dict = {name: {m: [] for m in ms} for name in models}
    for name in names:
        before(name)
        models[name].request.reset_state()
        models[name].feed(prefix, 0)
        past[name] = PREFIX_TOKENS
        for m in ms:  # each shape's first run: untimed
            models[name].feed(inputs[m], past[name])
            past[name] += m
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            before(name)
            for m in ms:
                fastest = float("inf")
                for _ in range(block):
                    t0 = time.perf_counter()
                    models[name].feed(inputs[m], past[name])
                    fastest = min(fastest, time.perf_counter() - t0)
                    past[name] += m
                best[name][m].append(fastest)
    return best


def sparse_points(ms: Sequence[int]) -> list[int]:
    """The step sizes measured on a sparse curve: the three smallest, the middle one and the
    largest (1, 2, 3, 5, 9 for K up to 8)."""
    ms = sorted(ms)
    return sorted(set(ms[:3] + [ms[len(ms) // 2]] + ms[-1:]))


def curve_costs(model: StatefulModel, ms: Sequence[int], sparse: bool = False, repeats: int = REPEATS,
                known: Optional[dict] = None) -> list[float]:
    """step_costs for every M in `ms`; `sparse` measures only sparse_points(ms) and
    interpolates linearly between them. Race-mode curves (one thread per pipeline, so
    slower steps) are sparse: the curve is smooth there, and a first launch should not
    spend a minute per format on them. `known` {M: seconds} are not measured again."""
    import numpy as np

    known = dict(known or {})
    points = sparse_points(ms) if sparse else list(ms)
    missing = [m for m in points if m not in known]
    if missing:
        known.update(zip(missing, step_costs(model, missing, repeats)))
    if not sparse:
        return [known[m] for m in ms]
    return [float(x) for x in np.interp(ms, points, [known[m] for m in points])]


def end_costs(model: StatefulModel, ms: Sequence[int], repeats: int = REPEATS) -> tuple[dict, list[float]]:
    """The curve's two ends measured ({M: seconds}) and the straight line between them.
    Measured verify curves rise steeply, then flatten, so they lie above that line, except
    for a dip of up to 9 % at M=2 (gguf, AMX Xeon): the line less OPTIMISM is an
    optimistic guess of the curve, good enough to skip a format that cannot win."""
    import numpy as np

    ends = [min(ms), max(ms)]
    known = dict(zip(ends, step_costs(model, ends, repeats)))
    return known, [float(x) for x in np.interp(ms, ends, [known[m] for m in ends])]


def greedy_answer(model: StatefulModel, prompt_ids: Sequence[int], max_new_tokens: int, eos: int,
                  stop: Optional[threading.Event] = None) -> tuple[list[int], list[float]]:
    """The main model's greedy answer (what every K of speculative decoding must produce),
    and the seconds each decoding step after the prompt took."""
    model.request.reset_state()
    logits = model.feed([list(prompt_ids)], 0)
    answer, seconds = [int(logits[0, -1].argmax())], []
    while len(answer) < max_new_tokens and answer[-1] != eos and not (stop and stop.is_set()):
        t0 = time.perf_counter()
        logits = model.feed([[answer[-1]]], len(prompt_ids) + len(answer) - 1)
        seconds.append(time.perf_counter() - t0)
        answer.append(int(logits[0, -1].argmax()))
    return answer, seconds


def draft_guesses(model: StatefulModel, prompt_ids: Sequence[int], answer: Sequence[int]) -> list[int]:
    """What the draft would guess for each token of `answer`, given everything before it.

    One pass over prompt + answer (teacher forcing). With greedy decoding this is exactly
    what speculative decoding asks of the draft: a step starting at answer[p] guesses
    answer[p], then — only if that guess was right, so the context is the same — answer[p+1], …
    """
    model.request.reset_state()
    logits = model.feed([list(prompt_ids) + list(answer[:-1])], 0)
    if logits.shape[1] != len(prompt_ids) + len(answer) - 1:
        raise DemoError("The draft model returns logits for the last position only; calibration "
                        "needs every position's (export it without logits slicing).")
    return [int(x) for x in logits[0, len(prompt_ids) - 1:].argmax(-1)]


def pipeline_overhead(pair: tuple, folders: dict, prompts: Sequence[str], max_new_tokens: int,
                      threads: Optional[int], ks: Sequence[int], predicted_step_s: Callable[[int], float],
                      one_token_s: float, stop: Optional[threading.Event] = None,
                      baseline_step_s: Optional[float] = None, beside: Optional[str] = None,
                      runners: Optional[dict] = None, precision: str = "f32") -> dict:
    """What a real speculative pipeline adds to each step beyond the model's K draft
    steps and one verify step, as a + b·K seconds; and what a real baseline pipeline adds
    to each token beyond the main model's one-token step `one_token_s`.

    The arena's own pipelines (these threads, greedy) run the (main, draft) `pair` on the
    calibration prompts, the speculative one at each K of `ks`; the time after the first
    token over the steps after it (one streamed chunk per step), less the model's step,
    is the overhead (`extra_s`, per K). For the speculative side a line through the two
    largest K gives a (per step: scheduling, sampling, the verify's bookkeeping) and b (per
    guess: the draft's own scheduler step) for the K not timed.

    The raw model leaves all that out, and a fixed cost per step weighs most on small K.
    `baseline_step_s`, when the same baseline pipeline was just timed alone (plain_rates),
    is used as its step instead of loading it again (a load costs a main model's first
    inference, 5–9 s on a 2-core Zen 4). `beside` (race mode: a main folder) times the two
    as a race does, at once (demo.calibrate.beside): the baseline runs that main beside the
    speculative pipeline, and its rates per run come back too; `runners`, when given, are
    that pair's warm runners (the app's own race pipelines), used and left loaded."""
    import gc
    from concurrent.futures import ThreadPoolExecutor

    from ..core.settings import GenerationSettings, PipelineOptions
    from ..core.streaming import BASELINE, SPECULATIVE
    from ..engine.pipelines import PairKey, build_pair, build_side
    from .beside import time_beside
    from .cost_model import median

    key = PairKey(str(folders[("main", pair[0])]), str(folders[("draft", pair[1])]), "draft",
                  PipelineOptions(threads=threads, cpu_precision=precision),
                  baseline_main=beside if beside and beside != str(folders[("main", pair[0])]) else None)

    decoded: dict = {}  # "K" -> the speculative side's decode tok/s, from step_s's last call

    def step_s(runner, k_values: Sequence[int]) -> dict:
        """Seconds per streamed step at each K, the K interleaved prompt by prompt (so a
        machine's drift hits every K alike), over rounds of the prompts until each K has
        OVERHEAD_MIN_S of timed steps (one short answer is too few to time), at most
        OVERHEAD_MAX_ROUNDS rounds."""
        seconds, steps, tokens = dict.fromkeys(k_values, 0.0), dict.fromkeys(k_values, 0), dict.fromkeys(k_values, 0)
        for _ in range(OVERHEAD_MAX_ROUNDS):
            for text in prompts:
                for k in k_values:
                    if stop is not None and stop.is_set():
                        raise DemoError("Calibration was stopped; nothing was saved.")
                    run = runner.run(text, GenerationSettings(max_new_tokens=max_new_tokens, assistant_tokens=k),
                                     lambda chunk: True)
                    if run.error or len(run.chunks) < 2:
                        raise DemoError(f"The {runner.side} pipeline on main {pair[0]}, draft {pair[1]} failed "
                                        f"while calibrating ({run.error or 'no steps'}); check the prepared models.")
                    seconds[k] += run.chunks[-1].t - run.chunks[0].t
                    steps[k] += len(run.chunks) - 1
                    tokens[k] += sum(len(c.token_ids) for c in run.chunks[1:])
            if min(seconds.values()) >= OVERHEAD_MIN_S:
                break
        decoded.update({str(k): tokens[k] / seconds[k] for k in k_values})  # tok/s after the first token
        return {k: seconds[k] / steps[k] for k in k_values}

    k0, extra = ks[0], {}
    if beside is not None:
        own, runners = runners is None, runners or build_pair(key, lambda m: None)  # warmed up at once, as a race
        try:
            first = GenerationSettings(max_new_tokens=WARMUP_TOKENS, assistant_tokens=k0)
            with ThreadPoolExecutor(2) as pool:  # a real prompt's first run compiles new shapes: untimed
                list(pool.map(lambda r: r.run(prompts[0], first, lambda chunk: True), runners.values()))
            steps, rates, share = time_beside(runners[BASELINE], prompts, GenerationSettings(max_new_tokens=max_new_tokens),
                                              lambda: step_s(runners[SPECULATIVE], ks), decode_tok_s, stop)
        finally:
            if own:
                del runners
                gc.collect()
        measured = {(SPECULATIVE, k): v for k, v in steps.items()}
        measured[(BASELINE, k0)] = 1 / median(rates)
        # Both measured in the same seconds, as a race shows them: what speculation buys here, paired.
        extra = {"baseline_rates": rates, "beside_share": share, "speculative_tok_s": dict(decoded)}
    else:
        measured = {} if baseline_step_s is None else {(BASELINE, k0): baseline_step_s}
    for side in (() if beside else (BASELINE, SPECULATIVE) if baseline_step_s is None else (SPECULATIVE,)):
        runner = build_side(key, side, lambda m: None, warmup=False)
        try:
            # A real prompt's first run compiles kernels for new shapes: untimed.
            runner.run(prompts[0], GenerationSettings(max_new_tokens=WARMUP_TOKENS, assistant_tokens=ks[0]),
                       lambda chunk: True)
            for k, seconds in step_s(runner, ks if side == SPECULATIVE else ks[:1]).items():
                measured[(side, k)] = seconds
        finally:
            del runner
            gc.collect()
    per_step, per_guess = fit_overhead({k: measured[(SPECULATIVE, k)] for k in ks}, predicted_step_s)
    return {"main_format": pair[0], "draft_format": pair[1],
            "measured_step_s": {str(k): measured[(SPECULATIVE, k)] for k in ks},
            "predicted_step_s": {str(k): predicted_step_s(k) for k in ks},
            "extra_s": {str(k): measured[(SPECULATIVE, k)] - predicted_step_s(k) for k in ks},
            "per_step_s": per_step, "per_guess_s": per_guess,
            "baseline_step_s": measured[(BASELINE, k0)], "baseline_overhead_s": measured[(BASELINE, k0)] - one_token_s,
            # fair mode: the speculative side's decode rates, timed last (step_s keeps its last call's)
            **(extra or {"speculative_tok_s": dict(decoded)})}


def prompt_ids(folder: Path, prompts: Sequence[str]) -> tuple[list[list[int]], int]:
    """The prompts as the arena feeds them (chat template when the model has one), and the EOS id."""
    import openvino_genai as og

    tokenizer = og.Tokenizer(str(folder))
    out = []
    for text in prompts:
        if tokenizer.chat_template:
            text = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
        out.append([int(t) for t in tokenizer.encode(text).input_ids.data[0]])
    return out, int(tokenizer.get_eos_token_id())


def decode_tok_s(chunks) -> Optional[float]:
    """Tokens per second after the first streamed chunk (the prefill and the first token
    left out): the rate the machine decodes at, comparable across formats and K."""
    if len(chunks) < 2 or chunks[-1].t <= chunks[0].t:
        return None
    return sum(len(c.token_ids) for c in chunks[1:]) / (chunks[-1].t - chunks[0].t)


def reads_along(model: StatefulModel, prompts_ids: Sequence[Sequence[int]],
                answers: Sequence[Sequence[int]]) -> list[list[int]]:
    """The model's greedy choice at every position of `answers`, reading each answer as
    written (teacher forcing): two formats' reads of the same answers compare their quality
    independently of where one of their own greedy answers would first drift."""
    return [draft_guesses(model, p, a) if len(a) >= 2 else [] for p, a in zip(prompts_ids, answers)]


def agreement(reads: Sequence[Sequence[int]], reference: Sequence[Sequence[int]]) -> float:
    """Share of positions where two reads_along of the same answers agree (1.0 when empty)."""
    pairs = [(x, y) for r, q in zip(reads, reference) for x, y in zip(r, q)]
    return sum(x == y for x, y in pairs) / len(pairs) if pairs else 1.0


def quality_gate(reads: dict, main_formats: Sequence[str], mains: dict,
                 report: Callable[[str], None]) -> tuple[dict, list[str], dict]:
    """Each main's quality, its greedy choices against the original weights' along the same
    answers ({format: reads_along}): (quality, the reasons some were refused, the usable
    {format: measure_main's result} of `mains`). A coarse format (formats.COARSE) whose
    quality was not read is refused: a model can fall apart in it."""
    quality, too_far = {}, []
    if REFERENCE_FORMAT in reads:
        for f in reads:
            quality[f] = agreement(reads[f], reads[REFERENCE_FORMAT])
            if quality[f] < MIN_AGREEMENT:
                too_far.append(f"main {f} agrees with the original GGUF's greedy choice on {quality[f]:.0%} of tokens, "
                               f"below {MIN_AGREEMENT:.0%}: not a candidate")
                report(too_far[-1])
    elif REFERENCE_FORMAT in main_formats and reads:
        report("the original GGUF main did not run here: no format's quality was read against it")
    for f in mains:
        if f in COARSE and f not in quality:
            report(f"main {f}'s quality was not read against the original GGUF: not a candidate")
    usable = {f: m for f, m in mains.items() if quality.get(f, 0.0 if f in COARSE else 1.0) >= MIN_AGREEMENT}
    return quality, too_far, usable
