"""What this machine has proven about native configurations (a model folder × a CPU thread
count): works, crashes, or too slow. Kept per machine fingerprint (CPU, ISA flags, cores,
RAM, OpenVINO version) in <cache>/safety/<fingerprint>.json, so a configuration that
crashed OpenVINO once is never tried again on this machine, across restarts.

NativeGuard.check_all runs the smoke test of a configuration never seen here in a child
process (demo.core.isolation) before this process compiles it; `python -m demo.doctor` runs it
for every format × thread count of a preset and prints the table.

The guard fails closed: a configuration is compiled in this process only once the record
says it works (or is merely slow). A child that fails with a Python error, a record that
cannot be written (disk full), a Stop, or a child that outlives its deadline (a busy
machine, retried once, never recorded as a crash) leave it unproven, and it is refused with
a sentence (NativeGuard.require, why_not).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from ..core.errors import Cancelled, DemoError
from ..core.isolation import NativeCrash, NativeTimeout, run
from ..core.files import write_atomic

SMOKE_TIMEOUT_S = 300   # compile + a 100-token prefill: a minute for an f16 1.5B on one slow core
SMOKE_ATTEMPTS = 2      # a smoke test that outlives its deadline is tried once more, then left unproven
TOO_SLOW_MS = 2000      # per token: no visitor waits for that; doctor says so (still usable)
STEPS = 12     # new tokens: prompt lookup verifies up to VERIFY_K + 1 a step
VERIFY_K = 3
# About 100 tokens that repeat themselves, so prompt lookup finds its n-grams at once and
# the model verifies several tokens a step, as the main does in a speculative race.
SMOKE_PROMPT = "def add(a, b):\n    return a + b\n\n" * 8 + "def add(a, b):\n"

WORKS, CRASHES, TOO_SLOW = "works", "crashes", "too slow"


@dataclass(frozen=True)
class NativeConfig:
    """One model folder compiled with one CPU thread count (None: OpenVINO's default). An
    EAGLE-3 head cannot run alone: `main` names the main model folder it drafts for, and the
    pair is proven together (the head must also accept some of its guesses: issue 4425)."""

    folder: str
    role: str = "main"
    threads: Optional[int] = None
    main: Optional[str] = None
    precision: str = "f32"  # the activation precision it is compiled with (PipelineOptions.cpu_precision)
    # "SDPA": the main model alone on OpenVINO GenAI's stateful backend (a baseline calibration
    # measured faster so, PipelineOptions.baseline_attention), another compile of the same folder.
    attention: str = "PA"

    @property
    def key(self) -> str:
        pair = f"+{Path(self.main).name}" if self.main else ""
        # f32 keys stay as they were before precision was a choice: their proofs still hold.
        at = "" if self.precision == "f32" else f"|{self.precision}"
        backend = "" if self.attention == "PA" else f"|{self.attention}"
        return f"{Path(self.folder).name}{pair}|{self.threads or 'default'}{at}{backend}"

    @property
    def weight_format(self) -> str:
        try:
            return json.loads((Path(self.folder) / ".ready.json").read_text()).get("format") or "gguf"
        except (OSError, ValueError, AttributeError):
            return "IR"

    def describe(self) -> str:
        threads = ("OpenVINO's default threads" if self.threads is None
                   else f"{self.threads} thread{'s' if self.threads != 1 else ''}")
        if self.precision != "f32":
            threads += f" and {self.precision} activations"
        if self.attention != "PA":
            threads += f" on the stateful backend ({self.attention})"
        if self.main:
            return f"the {self.weight_format} EAGLE-3 head with its main, {threads}"
        return f"the {self.weight_format} {self.role} with {threads}"


_LOCKS: dict[str, threading.Lock] = {}  # one lock per record file, whoever opens it in this process
_LOCKS_LOCK = threading.Lock()


def _lock_for(path: Path) -> threading.Lock:
    with _LOCKS_LOCK:
        return _LOCKS.setdefault(os.path.realpath(path), threading.Lock())


class SafetyRecord:
    """One record per cache folder and machine: every instance on the same file shares one
    lock (and a file lock for other processes, a cluster's replicas), so no verdict is lost
    to another writer's read-modify-write."""

    def __init__(self, cache_dir: Path, machine_key: Optional[str] = None):
        if machine_key is None:
            from ..core.machine import fingerprint_key

            machine_key = fingerprint_key()
        self.path = Path(cache_dir) / "safety" / f"{machine_key}.json"
        self._lock = _lock_for(self.path)

    @contextlib.contextmanager
    def _exclusive(self):
        import fcntl

        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path.with_name(self.path.name + ".lock"), "a") as held:
                fcntl.flock(held, fcntl.LOCK_EX)  # released when the file closes
                yield

    def _read(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}  # none yet, or damaged: configurations are proven again, never assumed

    def get(self, config: NativeConfig) -> Optional[dict]:
        return self._read().get(config.key)

    def put(self, config: NativeConfig, status: str, detail: str, ms_per_token: Optional[float] = None) -> None:
        with self._exclusive():
            data = self._read()
            data[config.key] = {"status": status, "detail": detail, "role": config.role,
                                "format": config.weight_format, "threads": config.threads,
                                "precision": config.precision,
                                "ms_per_token": ms_per_token, "at": time.time()}
            write_atomic(self.path, json.dumps(data, indent=1))

    def crashes(self, folders: Optional[list] = None) -> dict:
        """{key: entry} of every configuration that crashed here (of these model folders)."""
        names = None if folders is None else {Path(f).name for f in folders}
        return {key: e for key, e in self._read().items()
                if e.get("status") == CRASHES and (names is None or key.split("|")[0] in names)}

    def unusable(self, config: NativeConfig) -> Optional[str]:
        """The recorded sentence when `config` crashed here, else None."""
        entry = self.get(config)
        return entry["detail"] if entry and entry.get("status") == CRASHES else None


class NativeGuard:
    """Proves a configuration in a child before this process compiles it (once per machine)."""

    def __init__(self, record: SafetyRecord, target: str = "demo.engine.native_guard:smoke_test",
                 timeout_s: float = SMOKE_TIMEOUT_S, attempts: int = SMOKE_ATTEMPTS):
        self.record, self.target, self.timeout_s, self.attempts = record, target, timeout_s, attempts
        self._failures: dict[str, str] = {}  # key -> why this process could not prove it (not recorded)
        # A check already running (the launch starts one as soon as a model is on disk): a
        # second caller waits for its verdict instead of proving the same thing beside it.
        self._running: dict[str, threading.Event] = {}
        self._running_lock = threading.Lock()

    def check_all(self, configs: list[NativeConfig], status: Callable[[str], None] = lambda m: None,
                  cancel: Optional[threading.Event] = None) -> None:
        """Prove every configuration with no verdict here, at once (each child compiles with its
        own thread count, so two one-thread checks use two cores); what crashes is recorded."""
        pending: dict[str, NativeConfig] = {}
        for config in configs:  # a model drafting for itself is one configuration, named as the main
            if self.record.get(config) is None:
                pending.setdefault(config.key, config)
        workers, elsewhere = [], []
        with self._running_lock:
            for key, config in pending.items():
                if key in self._running:
                    elsewhere.append((config, self._running[key]))
                else:
                    self._running[key] = threading.Event()
                    workers.append(threading.Thread(target=self._check_quietly, args=(config, status, cancel),
                                                    daemon=True))
        for w in workers:
            w.start()
        for config, done in elsewhere:
            status(f"checking once that OpenVINO runs {config.describe()} on this CPU")
            done.wait()
        for w in workers:
            w.join()

    def _check_quietly(self, config: NativeConfig, status, cancel) -> None:
        self._failures.pop(config.key, None)
        try:
            self.prove(config, status, cancel)
        except DemoError as e:  # not proven (a Python error in the child, a Stop, a timeout): refused, not recorded
            self._failures[config.key] = str(e)
            status(str(e))
        except Exception as e:  # anything else leaves it unproven too: the guard fails closed
            self._failures[config.key] = f"checking {config.describe()} failed ({type(e).__name__})"
            status(self._failures[config.key])
        finally:
            with self._running_lock:
                self._running.pop(config.key).set()

    def why_not(self, config: NativeConfig) -> Optional[str]:
        """None when the record says `config` runs here (works, or too slow), else why it may not be compiled."""
        entry = self.record.get(config) or {}
        if entry.get("status") in (WORKS, TOO_SLOW):
            return None
        if entry.get("status") == CRASHES:
            return entry["detail"]
        return self._failures.get(config.key) or f"{config.describe()} was not proven to run on this CPU"

    def require(self, configs: list[NativeConfig], status: Callable[[str], None] = lambda m: None,
                cancel: Optional[threading.Event] = None) -> None:
        """Prove what was never proven here, then refuse (DemoError) unless every one runs."""
        self.check_all(configs, status, cancel)
        if cancel is not None and cancel.is_set():
            raise Cancelled("Stopped while OpenVINO was being checked on this CPU.")
        reasons = [why for why in map(self.why_not, configs) if why]
        if reasons:
            raise DemoError(f"{reasons[0]}; choose another weight format (python -m demo.doctor shows which run "
                            "on this CPU).")

    def prove(self, config: NativeConfig, status, cancel) -> dict:
        status(f"checking once that OpenVINO runs {config.describe()} on this CPU")
        for attempt in range(1, self.attempts + 1):
            try:
                result = run(self.target, {"folder": config.folder, "threads": config.threads, "main": config.main,
                                           "precision": config.precision, "attention": config.attention},
                             what=f"running {config.describe()}", timeout_s=self.timeout_s, cancel=cancel)
                break
            except NativeTimeout:  # a busy machine is not a crash: try again, and never record it
                if attempt == self.attempts:
                    raise DemoError(f"OpenVINO did not finish running {config.describe()} within "
                                    f"{self.timeout_s:.0f} s, {self.attempts} times (the machine may be busy); "
                                    "nothing was recorded, so it is checked again next time") from None
                status(f"checking {config.describe()} took over {self.timeout_s:.0f} s; trying once more")
            except NativeCrash as e:
                sentence = f"{e}; that configuration is skipped"
                self._put(config, CRASHES, sentence)
                status(sentence)
                return self.record.get(config)
        ms = float(result["ms_per_token"])
        if result.get("accepted") == 0:  # an EAGLE-3 head that runs but never guesses right
            sentence = (f"{config.describe()} accepted none of its {result.get('drafted', 0)} guesses on a repetitive "
                        "greedy prompt (openvino.genai issue 4425); that configuration is skipped")
            self._put(config, CRASHES, sentence, ms)
            status(sentence)
            return self.record.get(config)
        if ms > TOO_SLOW_MS:
            self._put(config, TOO_SLOW, f"{config.describe()} takes {ms:.0f} ms a token on this CPU", ms)
        else:
            self._put(config, WORKS, f"{config.describe()}: {ms:.0f} ms a token", ms)
        return self.record.get(config)

    def _put(self, config: NativeConfig, *verdict) -> None:
        try:
            self.record.put(config, *verdict)
        except OSError as e:  # disk full, read-only: what is not recorded is not proven
            raise DemoError(f"the check of {config.describe()} could not be saved ({e.strerror or type(e).__name__}), "
                            "so it is not used; free disk space on the server and try again") from None


def smoke_test(args: dict, send: Callable[[str], None]) -> dict:
    """The child's side: compile the folder as the arena's pipelines compile it (the
    continuous-batching scheduler, paged attention, the properties placement gives the thread
    count), prefill a prompt of about 100 tokens, then decode with prompt lookup, so the model
    also runs the multi-token verify steps a speculative side runs (where the known native
    crashes happen); a stateful baseline (attention "SDPA") is compiled as the arena compiles it
    and decodes one token a step. Returns ms a token after the first, and the most tokens one
    step made."""
    import openvino_genai as ov

    from ..core import placement
    from ..core.settings import PipelineOptions
    from .openvino_runner import scheduler_config

    options = PipelineOptions(threads=args["threads"], cpu_precision=args.get("precision", "f32"))
    config = ov.GenerationConfig()
    config.max_new_tokens, config.ignore_eos, config.apply_chat_template = STEPS, True, False
    if args.get("attention", "PA") == "PA":  # drafting: the multi-token verify steps
        config.num_assistant_tokens, config.max_ngram_size = VERIFY_K, 3
    if args.get("main"):  # an EAGLE-3 head, drafting for its main as in a race
        head = ov.draft_model(args["folder"], "CPU", **placement.draft_properties("CPU", options, "eagle3"))
        pipe = ov.LLMPipeline(args["main"], "CPU", draft_model=head, scheduler_config=scheduler_config(options),
                              **placement.pipeline_properties("CPU", options, "eagle3"))
    elif args.get("attention", "PA") != "PA":  # a stateful baseline: no scheduler, no multi-token steps
        options = options.with_baseline_attention(args["attention"])
        pipe = ov.LLMPipeline(args["folder"], "CPU", **placement.baseline_properties("CPU", options, "draft"))
    else:
        pipe = ov.LLMPipeline(args["folder"], "CPU", prompt_lookup=True, scheduler_config=scheduler_config(options),
                              **placement.pipeline_properties("CPU", options, "prompt_lookup"))
    decoded = pipe.generate([SMOKE_PROMPT], config)
    metrics = decoded.perf_metrics
    tokens = int(metrics.get_num_generated_tokens())
    decoding_ms = metrics.get_generate_duration().mean - metrics.get_ttft().mean
    out = {"ms_per_token": decoding_ms / max(1, tokens - 1),
           "largest_step": max((int(n) for n in metrics.raw_metrics.m_batch_sizes), default=1)}
    if args.get("main"):
        ext = decoded.extended_perf_metrics
        out.update(accepted=int(ext.get_num_accepted_tokens()), drafted=int(ext.get_num_draft_tokens()))
    return out
