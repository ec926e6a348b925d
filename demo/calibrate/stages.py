"""Calibration, one stage at a time, each stage in a child process (demo.core.isolation).

A stage measures one thing (a draft format, a main format, a real pipeline's overhead in
one mode, or converts one weight format). Run in a child, a native crash (demo.core.isolation
says which are known) costs only that stage: the configuration the child announced last is
recorded unusable for this machine (demo.engine.native_guard), the stage runs again without it,
and calibration goes on. Each finished stage is saved, so a restart
resumes instead of measuring again; the app runs each stage in its own admission slot, so
a visitor waits at most one stage, never the whole calibration.

The functions named in STAGES run in the child: `(args, send) -> dict` with JSON args.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from pathlib import Path
from typing import Callable, ContextManager, Optional

from ..core import isolation
from ..core.errors import DemoError
from ..engine.native_guard import CRASHES, WORKS, NativeConfig, SafetyRecord
from . import cost_model, measure, plain
from ..models.calibration_result import plain_key, split_plain_key
from ..core.files import write_atomic

NATIVE = "@native "   # a child's message announcing the configuration it is about to compile
MAX_CRASHES_PER_STAGE = 4
DISTURBED = 1.25  # a curve's one-token step this far above real decoding steps was disturbed
STAGE_TIMEOUT_S = 900  # a stage that hangs this long is a crash, not a slow machine


def announce(send: Callable[[str], None], config: NativeConfig) -> None:
    send(NATIVE + json.dumps([config.folder, config.role, config.threads, config.main, config.precision,
                              config.attention]))


# -- the child's side ------------------------------------------------------------------

def measure_drafts(args: dict, send) -> dict:
    """Every draft format's single-token step, in each mode's threads it can run with, the
    formats INTERLEAVED (measure.interleaved_step_costs): {format: {"step_s": {mode: s},
    "memory_bytes": n}}. Measured one after another, two drafts' 2-thread steps on a 2-core
    Zen 4 read 18 against 32 ms in one launch and 26 against 20 in the next."""
    out = {fmt: {"step_s": {}, "memory_bytes": 0} for fmt in args["folders"]}
    for mode, threads in args["threads"].items():
        configs = {fmt: NativeConfig(folder, "draft", threads) for fmt, folder in args["folders"].items()}
        configs = {fmt: c for fmt, c in configs.items() if c.key not in args["unusable"]}
        if not configs:
            continue
        send(f"measuring the draft models ({', '.join(configs)}, {mode} threads, in turn)")
        models = {}
        try:
            for fmt, config in configs.items():
                announce(send, config)
                models[fmt] = measure.StatefulModel(Path(config.folder), threads)
                out[fmt]["memory_bytes"] = max(out[fmt]["memory_bytes"], models[fmt].memory)
            # Each block re-announces its model: a crash while stepping is that configuration's.
            steps = measure.interleaved_step_costs(models, args.get("repeats", measure.DRAFT_REPEATS),
                                                   before=lambda fmt: announce(send, configs[fmt]))
            for fmt, seconds in steps.items():
                out[fmt]["step_s"][mode] = seconds
        finally:
            for model in models.values():
                model.close()
    return out


def measure_main(args: dict, send) -> dict:
    """One main format: its verify-cost curve per mode, its greedy answers to the prompts,
    how far each draft format guesses along them (agreement runs), and its own greedy
    choice at every position of the first answers measured (`reads`: its quality is the
    share where they agree with the original weights', read while it is loaded anyway).
    `alone_only` (Plan.alone_only): the reads and memory only, no curve: a format that can be
    the baseline, timed alone by measure_plain, and is never a pair's main."""
    fmt, folder, k_max = args["format"], Path(args["folder"]), args["k_max"]
    ms = list(range(1, k_max + 2))
    prior = args["prior"]
    prior_runs = {tuple(k.split("/")): v for k, v in prior["runs"].items()}
    ids, eos = measure.prompt_ids(folder, args["texts"])
    curves, memory, decode, runs, ends_only, reads, answers = {}, 0, [], {}, None, None, None
    precision_measured = None
    for mode, threads in args["threads"].items():
        config = NativeConfig(str(folder), "main", threads)
        if config.key in args["unusable"]:
            if mode == "fair":
                break  # no answers, no acceptance: this format cannot be chosen here
            continue
        send(f"measuring the main model ({fmt}, {mode} threads): verify cost for 1..{k_max + 1} tokens")
        announce(send, config)
        model = measure.StatefulModel(folder, threads)
        try:
            if mode == "fair" and args.get("read_along"):  # another format's answers, before any skip
                reads = measure.reads_along(model, ids, args["read_along"])
            if args.get("alone_only"):  # a candidate baseline only: its quality here, its speed timed alone later
                memory = model.memory
                send(f"main model {fmt}: its quality read; it is timed alone, not measured as a pair's main")
                break
            repeats, known = args.get("repeats", measure.REPEATS), {}
            if mode == "fair" and prior["mains"]:
                # Both ends first: a format that cannot win even on an optimistic line
                # between them is skipped before its whole curve is measured.
                known, line = measure.end_costs(model, ms, repeats)
                optimistic = [c * (1 - measure.OPTIMISM) for c in line]
                if cost_model.dominated(optimistic, prior["mains"], prior["drafts"], prior_runs, k_max):
                    curves[mode], ends_only = line, sorted(known)
                    memory = max(memory, model.memory)
                    send(f"main model {fmt} cannot beat the formats measured so far: skipped")
                    break
            curves[mode] = measure.curve_costs(model, ms, sparse=(mode == "race" or args.get("sparse_fair", False)),
                                               repeats=repeats, known=known)
            memory = max(memory, model.memory)
            if mode == "fair" and args.get("precision"):  # this machine's activation precision (precision.py)
                precision_measured = measure_precision(model, config, fmt, args["unusable"], send)
            if mode == "fair" and cost_model.dominated(curves["fair"], prior["mains"], prior["drafts"], prior_runs,
                                                        k_max):
                # Even with the best acceptance seen so far (+10 %) and the cheapest draft it
                # cannot beat a format already measured: skip its answers and race curve.
                send(f"main model {fmt} cannot beat the formats measured so far: skipped")
                break
            if mode == "fair" and args.get("answer", True):
                send(f"answering {len(ids)} prompts with the main model ({fmt}) to measure acceptance")
                answers = []
                for p in ids:
                    answer, seconds = measure.greedy_answer(model, p, args["max_new_tokens"], eos)
                    answers.append(answer)
                    decode += seconds
                if reads is None:  # the first answers: read along its own
                    reads = measure.reads_along(model, ids, answers)
                curves[mode] = recheck(model, curves[mode], decode, ms, repeats, args.get("sparse_fair", False), fmt,
                                       send)
                for df, draft_folder in args["drafts"].items():
                    guesser_config = NativeConfig(draft_folder, "draft", None)
                    if guesser_config.key in args["unusable"]:
                        continue
                    announce(send, guesser_config)
                    guesser = measure.StatefulModel(Path(draft_folder), None)
                    try:
                        runs[df] = [cost_model.agreement_runs(measure.draft_guesses(guesser, p, a), a)
                                    for p, a in zip(ids, answers)]
                    finally:
                        guesser.close()
        finally:
            model.close()
    return {"verify_s": curves, "memory_bytes": memory,
            # The caller lends acceptance from another main format when this one did not answer.
            "dominated": "race" not in curves or "fair" not in curves or (args.get("answer", True) and not runs),
            # Median time of one real decoding step (growing past): a check on verify_s[0].
            "decode_step_s": sorted(decode)[len(decode) // 2] if decode else None,
            "runs": runs, **({"fair_measured_at": ends_only} if ends_only else {}),
            **({"reads": reads} if reads is not None else {}),
            **({"precision": precision_measured} if precision_measured is not None else {}),
            # The greedy answers themselves: a weight format's quality is read along them (reads).
            **({"answers": answers} if answers is not None else {})}


def measure_precision(model, config: NativeConfig, fmt: str, unusable: list, send) -> Optional[dict]:
    """The plugin's default activation precision against f32 on this loaded main (precision.measure);
    None where that configuration crashed here before."""
    from . import precision

    default = precision.plugin_default()
    if default == precision.PRIOR:
        return {"default": default}  # nothing else to build with on this CPU
    other = NativeConfig(config.folder, config.role, config.threads, precision=default)
    if other.key in unusable:
        return None  # it crashed here before
    send(f"measuring the main model ({fmt}): {default} activations against f32, in turn")
    announce(send, other)
    try:
        return precision.measure(model, Path(config.folder), config.threads, default)
    finally:
        announce(send, config)  # what runs next is the f32 model again


def recheck(model, curve: list, decode_s: list, ms: list, repeats: int, sparse: bool, fmt: str, send) -> list:
    """The curve again if its one-token step reads DISTURBED× above the real decoding steps
    of the answers just measured with the same model (other work ran during the curve:
    one read 145 ms against 86 ms, and calibration chose a slow format); the faster of
    the two readings of each M, since other work only ever adds time."""
    if not decode_s or curve[0] <= DISTURBED * sorted(decode_s)[len(decode_s) // 2]:
        return curve
    send(f"main model {fmt}: its step costs read high against its real decoding steps; measuring them again")
    again = measure.curve_costs(model, ms, sparse=sparse, repeats=repeats)
    return [min(a, b) for a, b in zip(curve, again)]


def measure_overhead(args: dict, send, runners: Optional[dict] = None) -> dict:
    """What a real speculative (and baseline) pipeline adds per step, for one mode; in race
    mode (`beside`: the baseline's main folder) the two timed at once, as a race runs them
    (`runners`: the app's own, already loaded, when it runs in the app: StageRunner.run_here)."""
    folders = {("main", args["pair"][0]): args["main_folder"], ("draft", args["pair"][1]): args["draft_folder"]}
    for folder, role in dict.fromkeys(((args["main_folder"], "main"), (args["draft_folder"], "draft"),
                                       *([(args["beside"], "main")] if args.get("beside") else []))):
        announce(send, NativeConfig(folder, role, args["threads"], precision=args.get("precision", "f32")))
    predicted = {int(k): v for k, v in args["predicted_step_s"].items()}
    return measure.pipeline_overhead(tuple(args["pair"]), folders, args["texts"], args["max_new_tokens"],
                                     args["threads"], args["ks"], lambda k: predicted[k], args["one_token_s"],
                                     baseline_step_s=args.get("baseline_step_s"), beside=args.get("beside"),
                                     runners=runners, precision=args.get("precision", "f32"))


def measure_plain(args: dict, send) -> dict:
    """Every main format's real baseline pipeline, interleaved, in one mode's threads
    (plain.plain_rates): what this machine does without a draft. `only`: the plain keys to
    time, when not every format on every backend (a profile's confirmation)."""
    threads, at = args["threads"], args.get("precision", "f32")
    attentions = args.get("attentions", ["PA"])
    folders = {f: d for f, d in args["folders"].items()
               if NativeConfig(d, "main", threads, precision=at).key not in args["unusable"]}

    def native(key: str) -> NativeConfig:
        fmt, attention = split_plain_key(key)
        return NativeConfig(folders[fmt], "main", threads, precision=at, attention=attention)

    reference = None
    if args.get("llama_gguf") and folders:  # llama.cpp's plain decoding of the same GGUF, as a reference
        from ..core.settings import cpu_cores
        from ..engine.llamacpp import LlamaCppSide
        from ..engine.openvino_runner import template
        import openvino_genai

        tokenizer = openvino_genai.Tokenizer(next(iter(folders.values())))  # the arena's own prompt text
        reference = lambda: LlamaCppSide(Path(args["llama_gguf"]), threads or cpu_cores(),  # noqa: E731
                                         lambda text: template(tokenizer, text))
    return plain.plain_rates(folders, args["texts"], args["max_new_tokens"], threads, args["rounds"], send,
                               before_load=lambda key: announce(send, native(key)),
                               reference=reference, precision=at, attentions=attentions,
                               skip=[plain_key(f, a) for f in folders for a in attentions
                                     if native(plain_key(f, a)).key in args["unusable"]
                                     or plain_key(f, a) not in args.get("only", [plain_key(f, a)])])


# -- the parent's side -----------------------------------------------------------------

class StageRunner:
    """Runs named stages in children, saving each result in `path`; a restart with the same
    `identity` (what was asked: formats, prompts, K) reuses them."""

    def __init__(self, path: Path, identity: dict, record: SafetyRecord, report: Callable[[str], None],
                 stop: Optional[threading.Event] = None,
                 slot: Callable[[str], ContextManager] = lambda name: contextlib.nullcontext(),
                 module: str = "demo.calibrate.stages"):
        self.path, self.record, self.report, self.stop, self.slot, self.module = path, record, report, stop, slot, module
        self.identity = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
        self.done: dict = {}
        try:
            saved = json.loads(path.read_text())
            if saved.get("identity") == self.identity:
                self.done = saved["stages"]
        except (OSError, ValueError, KeyError, AttributeError):
            pass
        self.resumed = len(self.done)

    def skipped(self, folders: list) -> list[str]:
        """The recorded sentences of configurations of these model folders that crashed here."""
        return sorted({e["detail"] for e in self.record.crashes(folders).values()})

    def unusable(self) -> list[str]:
        return list(self.record.crashes())

    def _reused(self, name: str, what: str) -> bool:
        """Whether stage `name` was measured before a restart (its result is then self.done[name])."""
        if name in self.done:
            self.report(f"{what}: measured before this restart, reused")
            return True
        return False

    def run(self, name: str, function: str, args: dict, what: str) -> dict:
        if self._reused(name, what):
            return self.done[name]
        for _ in range(MAX_CRASHES_PER_STAGE):
            announced: list[NativeConfig] = []

            def on_message(message: str) -> None:
                if message.startswith(NATIVE):
                    announced.append(NativeConfig(*json.loads(message[len(NATIVE):])))
                else:
                    self.report(message)

            try:
                with self.slot(what):
                    result = isolation.run(f"{self.module}:{function}", {**args, "unusable": self.unusable()},
                                           what=what, timeout_s=STAGE_TIMEOUT_S, on_message=on_message,
                                           cancel=self.stop)
            except isolation.NativeTimeout as e:  # a busy machine, not a crash: nothing is recorded
                raise DemoError(f"{e}; nothing was recorded, so calibration can run again later.") from None
            except isolation.NativeCrash as e:
                if not announced:
                    raise DemoError(f"{e} before it compiled a model; see the terminal, then restart the app.") from None
                config = announced[-1]
                sentence = f"OpenVINO crashed ({e.how}) running {config.describe()} on this CPU; that configuration is skipped"
                self.record.put(config, CRASHES, sentence)
                self.report(sentence)
                continue
            for config in announced:
                if self.record.get(config) is None:
                    self.record.put(config, WORKS, f"{config.describe()}: measured by calibration")
            self.done[name] = result
            self._save()
            return result
        raise DemoError(f"OpenVINO crashed {MAX_CRASHES_PER_STAGE} times {what}; run python -m demo.doctor "
                        "to see which configurations work on this CPU.")

    def run_here(self, name: str, work: Callable[[], dict], what: str) -> dict:
        """A stage run in this process by `work` (which isolates native code itself, as the
        app's child-process pipelines do), saved and reused after a restart like the others."""
        if self._reused(name, what):
            return self.done[name]
        with self.slot(what):
            self.done[name] = work()
        self._save()
        return self.done[name]

    def _save(self) -> None:
        write_atomic(self.path, json.dumps({"identity": self.identity, "stages": self.done}))

    def finish(self) -> None:
        """The calibration is saved whole: its stages are no longer needed."""
        try:
            self.path.unlink()
        except OSError:
            pass
