"""What this machine has proven about native configurations (a model folder × a CPU thread
count): works, crashes, or too slow. Kept per machine fingerprint (CPU, ISA flags, cores,
RAM, OpenVINO version) in <cache>/safety/<fingerprint>.json, so a configuration that
crashed OpenVINO once is never tried again on this machine, across restarts.

NativeGuard.check runs the smoke test of a configuration never seen here in a child
process (demo.core.isolation) before this process compiles it; `python -m demo.doctor` runs it
for every format × thread count of a preset and prints the table.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from ..core.errors import DemoError
from ..core.isolation import NativeCrash, run
from ..core.files import write_atomic

SMOKE_TIMEOUT_S = 300   # compile + a 100-token prefill: a minute for an f16 1.5B on one slow core
TOO_SLOW_MS = 2000      # per token: no visitor waits for that; doctor says so (still usable)
PREFIX = 100
STEPS = 3

WORKS, CRASHES, TOO_SLOW = "works", "crashes", "too slow"


@dataclass(frozen=True)
class NativeConfig:
    """One model folder compiled with one CPU thread count (None: OpenVINO's default)."""

    folder: str
    role: str = "main"
    threads: Optional[int] = None

    @property
    def key(self) -> str:
        return f"{Path(self.folder).name}|{self.threads or 'default'}"

    @property
    def weight_format(self) -> str:
        try:
            return json.loads((Path(self.folder) / ".ready.json").read_text()).get("format") or "gguf"
        except (OSError, ValueError, AttributeError):
            return "IR"

    def describe(self) -> str:
        threads = ("OpenVINO's default threads" if self.threads is None
                   else f"{self.threads} thread{'s' if self.threads != 1 else ''}")
        return f"the {self.weight_format} {self.role} with {threads}"


class SafetyRecord:
    def __init__(self, cache_dir: Path, machine_key: Optional[str] = None):
        if machine_key is None:
            from ..core.machine import fingerprint_key

            machine_key = fingerprint_key()
        self.path = Path(cache_dir) / "safety" / f"{machine_key}.json"
        self._lock = threading.Lock()

    def _read(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}  # none yet, or damaged: configurations are proven again, never assumed

    def get(self, config: NativeConfig) -> Optional[dict]:
        return self._read().get(config.key)

    def put(self, config: NativeConfig, status: str, detail: str, ms_per_token: Optional[float] = None) -> None:
        with self._lock:
            data = self._read()
            data[config.key] = {"status": status, "detail": detail, "role": config.role,
                                "format": config.weight_format, "threads": config.threads,
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

    def __init__(self, record: SafetyRecord, target: str = "demo.engine.safety:smoke_test",
                 timeout_s: float = SMOKE_TIMEOUT_S):
        self.record, self.target, self.timeout_s = record, target, timeout_s
        # A check already running (the launch starts one as soon as a model is on disk): a
        # second caller waits for its verdict instead of proving the same thing beside it.
        self._running: dict[str, threading.Event] = {}
        self._running_lock = threading.Lock()

    def check_all(self, configs: list[NativeConfig], status: Callable[[str], None] = lambda m: None) -> None:
        """Prove every configuration never seen here, at once (each child compiles with its
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
                    workers.append(threading.Thread(target=self._check_quietly, args=(config, status), daemon=True))
        for w in workers:
            w.start()
        for config, done in elsewhere:
            status(f"checking once that OpenVINO runs {config.describe()} on this CPU")
            done.wait()
        for w in workers:
            w.join()

    def _check_quietly(self, config: NativeConfig, status) -> None:
        try:
            self.prove(config, status, None)
        except DemoError as e:  # not a native crash (a missing file, say): the load reports it
            status(str(e))
        finally:
            with self._running_lock:
                self._running.pop(config.key).set()

    def prove(self, config: NativeConfig, status, cancel) -> dict:
        status(f"checking once that OpenVINO runs {config.describe()} on this CPU")
        try:
            result = run(self.target, {"folder": config.folder, "threads": config.threads},
                         what=f"running {config.describe()}", timeout_s=self.timeout_s, cancel=cancel)
        except NativeCrash as e:
            sentence = f"{e}; that configuration is skipped"
            self.record.put(config, CRASHES, sentence)
            status(sentence)
            return self.record.get(config)
        ms = float(result["ms_per_token"])
        if ms > TOO_SLOW_MS:
            self.record.put(config, TOO_SLOW, f"{config.describe()} takes {ms:.0f} ms a token on this CPU", ms)
        else:
            self.record.put(config, WORKS, f"{config.describe()}: {ms:.0f} ms a token", ms)
        return self.record.get(config)


def smoke_test(args: dict, send: Callable[[str], None]) -> dict:
    """The child's side: compile the folder with the thread count, prefill 100 tokens, then
    decode a few steps (where the known native crashes happen); ms per decoded token."""
    from .stateful import StatefulModel

    model = StatefulModel(Path(args["folder"]), args["threads"])
    try:
        model.feed([list(range(1, PREFIX + 1))], 0)
        start = time.perf_counter()
        for i in range(STEPS):
            model.feed([[PREFIX + 1 + i]], PREFIX + i)
        return {"ms_per_token": (time.perf_counter() - start) / STEPS * 1000}
    finally:
        model.close()
