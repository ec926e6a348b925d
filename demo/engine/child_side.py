"""Each side's pipeline in a child process of its own, as the arena runs them for visitors.

Why a child: OpenVINO GenAI calls a streamer only once a step has produced tokens, so a Stop
cannot reach a side that is still reading its prompt (a prefill: seconds, up to a minute for
a long prompt on two cores), and `ContinuousBatchingPipeline.step()`, the way to read a
prompt in slices, holds Python's GIL, so stepping it from the app's process would freeze every
page (RELIABILITY.md). In a child, a Stop the side has not answered within STOP_GRACE_S (a
decoding side answers within one step, through its streamer) kills the child: the CPU is free
at once, and the next run loads that side again. A native crash while a side runs ends that
side with one sentence, not the app.

The parent starts `python -m demo.engine.child_side FD`, writes JSON lines to the
child's stdin ({"load": …} once, then {"run": …} and {"cancel": true}) and reads JSON lines
from pipe FD (status, ready, error, start, chunk, done); the child's stdout and stderr, where
native libraries print, go to a file whose last line explains a crash. The prompt checks run
here, in the parent, from the tokenizer in the main model's folder (PromptChecks), so a
refused prompt never reaches the child.
"""

from __future__ import annotations

import json
import os
import queue
import select
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import asdict, fields
from statistics import median
from typing import Callable, Optional

from ..core import isolation
from ..core.errors import DemoError, unexpected
from ..core.settings import GenerationSettings, PipelineOptions
from ..core.streaming import SIDES, Chunk, RunResult
from .pipelines import PairKey, PromptChecks, build_side

# How long a side stopped while still reading its prompt (no token yet) may take to answer before
# its child is killed: at least this, and STOP_GRACE_STEPS of the side's own decoding steps (the
# 1.5B main: 30-160 ms a step on two cores; a 7-8B one up to a second). A side already decoding is
# never killed for a Stop: it answers after its step, however busy the machine (its step deadline
# still ends a hang).
STOP_GRACE_S = 1.0
STOP_GRACE_STEPS = 3.0
# Deadlines for a child that stops answering (a hung native call, a machine swapping): the side
# ends with one sentence and its child is killed, so the machine is free for the next visitor.
LOAD_DEADLINE_S = 900.0       # load and warm-up: a 7-8B int4 pair takes 1-3 minutes on two cores
FIRST_TOKEN_FLOOR_S = 120.0   # a 4,096-token prefill of the 1.5B main on two cores takes ~20-60 s
FIRST_TOKEN_PREFILLS = 4.0    # ... and at most this many times the side's own prefill rate, once known
STEP_FLOOR_S = 10.0           # one decoding step, before and beyond ...
STEP_DEADLINE_STEPS = 25.0    # ... this many of the side's own median step
POLL_S = 0.05
_TIMEOUT = object()  # no line within the poll
_EOF = object()      # the child closed its pipe: it is gone


class ChildSide(PromptChecks):
    """One side of a pair, its pipeline loaded and warmed up in a child process.

    Has the runner interface (run, check_prompt, count_tokens, template) and, for the
    pipeline cache, alive(), resident_bytes() and close().
    """

    def __init__(self, key: PairKey, side: str, warmup: bool = True):
        super().__init__(key, side)
        self._lock = threading.Lock()  # one run at a time, as in OpenVINORunner
        self._stdin_lock = threading.RLock()  # a run's loop and its stop watcher both write commands
        self._closing = False
        self._buffer = b""
        self._lines: deque = deque()  # lines read from the pipe and not yet handled
        self._step_s: Optional[float] = None        # the side's median decoding step, from its last run
        self._prefill_s_per_token: Optional[float] = None  # its first-token time per prompt token
        read_fd, write_fd = os.pipe()
        self._read_fd = read_fd
        self._log = tempfile.TemporaryFile()
        try:
            self._child = isolation.start_child(["demo.engine.child_side", str(write_fd)], write_fd, self._log)
        finally:
            os.close(write_fd)
        self._send({"load": {"key": asdict(key), "side": side, "warmup": warmup}})

    # -- loading ---------------------------------------------------------------------------
    def wait_ready(self, status: Callable[[str], None] = lambda m: None) -> "ChildSide":
        """Block until the child's pipeline is loaded and warmed up, passing its status on.
        A load that fails, or passes LOAD_DEADLINE_S, ends the child and raises its sentence (DemoError)."""
        deadline = time.monotonic() + LOAD_DEADLINE_S
        while True:
            line = self._next(POLL_S)
            if line is _TIMEOUT:
                if time.monotonic() > deadline:
                    self.close()
                    raise DemoError(f"Loading the {self.side} pipeline took longer than {LOAD_DEADLINE_S:.0f} s, so "
                                    "it was stopped; try again, or choose a smaller preset.")
                continue
            if line is _EOF:
                how = isolation.describe_exit(self._child.wait()) + isolation.last_line(self._log)
                self.close()
                raise DemoError(f"OpenVINO crashed ({how}) loading the {self.side} pipeline on this CPU; "
                                "choose another preset or thread count.")
            kind, payload = line
            if kind == "status":
                status(payload)
            elif kind == "ready":
                return self
            elif kind == "error":
                self.close()
                raise DemoError(payload)

    # -- running ---------------------------------------------------------------------------
    def run(self, prompt, settings: GenerationSettings, on_chunk: Callable[[Chunk], bool],
            on_start: Callable[[float], None] = lambda t: None,
            stop: Optional[threading.Event] = None) -> RunResult:
        """As OpenVINORunner.run, in the child. Setting `stop` cancels the run; a side that has
        not answered STOP_GRACE_S later (still in its prefill) is killed, and its result is
        what it streamed so far, marked cancelled."""
        prompt_tokens = self.check_prompt(prompt, settings)
        with self._lock:
            if not self.alive():
                raise DemoError(f"The {self.side} pipeline is no longer loaded; press Run again to load it.")
            try:
                return self._run(prompt, prompt_tokens, settings, on_chunk, on_start, stop)
            finally:
                if self._closing:  # evicted while it ran: let go of its memory now
                    self._kill()

    def _run(self, prompt, prompt_tokens: int, settings, on_chunk, on_start, stop) -> RunResult:
        self._send({"run": {"prompt": prompt, "settings": asdict(settings)}})
        finished = threading.Event()
        if stop is not None:
            threading.Thread(target=self._cancel_when_raised, args=(stop, finished), daemon=True,
                             name=f"{self.side}-stop").start()
        try:
            return self._follow(on_chunk, on_start, stop, prompt_tokens)
        finally:
            with self._stdin_lock:  # no cancel from the watcher after this: it would hit the next run
                finished.set()

    def _cancel_when_raised(self, stop: threading.Event, finished: threading.Event) -> None:
        """Pass Stop on to the child the moment it is raised. The run's loop looks at `stop`
        only between the child's lines, a step apart while it decodes, and a chunk the child
        makes in that step is one more the visitor waits for after Stop."""
        while not finished.is_set():
            if stop.wait(0.25):  # returns at once when the flag goes up
                with self._stdin_lock:
                    if not finished.is_set():
                        self._cancel()
                return

    def _follow(self, on_chunk, on_start, stop, prompt_tokens: int) -> RunResult:
        """The child's lines for the run just sent, until its result (or a missed deadline)."""
        chunks: list[Chunk] = []
        started: Optional[float] = None
        cancelled_at: Optional[float] = None
        sent = last = time.perf_counter()
        gaps: list[float] = []
        allowed = max(FIRST_TOKEN_FLOOR_S, FIRST_TOKEN_PREFILLS * prompt_tokens * (self._prefill_s_per_token or 0.0))
        while True:
            now = time.perf_counter()
            if cancelled_at is None and stop is not None and stop.is_set():
                cancelled_at = self._cancel()
            if cancelled_at is not None and not chunks and now - cancelled_at > self._stop_grace():
                self._kill()  # still in its prompt: the CPU is given back now, the next run reloads
                return RunResult(self.side, start=started or now, end=now, chunks=chunks, cancelled=True)
            # A decoding side answers a Stop from its streamer, after the step in flight: on a busy
            # machine that step may outlast the grace, and killing it would cost the next visitor a
            # reload. It is ended only as any side is, when it misses its step deadline.
            if now - last > allowed:
                self._kill()
                if cancelled_at is not None:  # stopped, then silent past its deadline: ended as stopped
                    return RunResult(self.side, start=started or now, end=now, chunks=chunks, cancelled=True)
                return RunResult(self.side, start=started or now, end=now, chunks=chunks,
                                 error=f"the {self.side} pipeline stopped answering ({now - last:.0f} s without a "
                                       f"token, {allowed:.0f} s allowed), so it was ended; the next run loads it again")
            line = self._next(POLL_S)
            if line is _TIMEOUT:
                continue
            if line is _EOF:
                how = isolation.describe_exit(self._child.wait()) + isolation.last_line(self._log)
                now = time.perf_counter()
                return RunResult(self.side, start=started or now, end=now, chunks=chunks,
                                 error=f"OpenVINO crashed ({how}) in the {self.side} pipeline; the next run loads it again")
            kind, payload = line
            if kind == "start":
                started = payload
                on_start(payload)
            elif kind == "chunk":
                chunk = Chunk(self.side, tuple(payload["token_ids"]), payload["text"], payload["accepted_text"],
                              payload["t"])
                arrived = time.perf_counter()
                if chunks:
                    gaps.append(arrived - last)
                elif prompt_tokens:
                    self._prefill_s_per_token = (arrived - sent) / prompt_tokens
                last = arrived
                # The next chunk's deadline, from this side's own step (this run's so far, else its last run's).
                step = median(gaps) if gaps else self._step_s
                allowed = max(STEP_FLOOR_S, STEP_DEADLINE_STEPS * (step or 0.0))
                chunks.append(chunk)
                if not on_chunk(chunk) and cancelled_at is None:
                    cancelled_at = self._cancel()
            elif kind == "done":
                if gaps:
                    self._step_s = median(gaps)
                result = RunResult(**{k: v for k, v in payload.items() if k != "chunks"})
                result.chunks = chunks
                return result
            elif kind == "error":  # a failure outside generate() (run_side turns it into the side's sentence)
                raise DemoError(payload)

    def _stop_grace(self) -> float:
        return max(STOP_GRACE_S, STOP_GRACE_STEPS * (self._step_s or 0.0))

    def _cancel(self) -> float:
        try:
            self._send({"cancel": True})
        except OSError:  # the child is already gone; the next read says so
            pass
        return time.perf_counter()

    # -- the pipeline cache's view ------------------------------------------------------------
    def alive(self) -> bool:
        return self._child.poll() is None

    def resident_bytes(self) -> int:
        """The child's resident memory (what the cache budgets for this side)."""
        try:
            with open(f"/proc/{self._child.pid}/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return 0

    def close(self) -> None:
        """End the child now, or, while a run is in it, as soon as that run returns."""
        self._closing = True
        if self._lock.acquire(blocking=False):
            try:
                self._kill()
            finally:
                self._lock.release()

    def _kill(self) -> None:
        if self._child.poll() is None:
            isolation.kill(self._child)

    def __del__(self):
        try:
            self._kill()
            os.close(self._read_fd)
            self._log.close()
        except Exception:  # interpreter shutdown
            pass

    # -- the pipes ---------------------------------------------------------------------------
    def _send(self, message: dict) -> None:
        line = (json.dumps(message) + "\n").encode()
        with self._stdin_lock:
            self._child.stdin.write(line)
            self._child.stdin.flush()

    def _next(self, timeout: Optional[float]):
        """The child's next line ([kind, payload]), _TIMEOUT, or _EOF once it is gone."""
        while not self._lines:
            ready, _, _ = select.select([self._read_fd], [], [], timeout)
            if not ready:
                return _TIMEOUT
            data = os.read(self._read_fd, 1 << 16)
            if not data:
                return _EOF
            self._buffer += data
            *complete, self._buffer = self._buffer.split(b"\n")
            for raw in complete:
                self._lines.append(json.loads(raw))
        return self._lines.popleft()


def build_pair(key: PairKey, status: Callable[[str], None] = lambda m: None) -> dict:
    """Both sides of a pair in children of their own, loaded and warmed up at once."""
    children = {side: ChildSide(key, side) for side in SIDES}
    try:
        return {side: child.wait_ready(status) for side, child in children.items()}
    except BaseException:
        for child in children.values():
            child.close()
        raise


def build_child_side(key: PairKey, side: str, status: Callable[[str], None] = lambda m: None,
                     warmup: bool = True) -> ChildSide:
    return ChildSide(key, side, warmup).wait_ready(status)


# -- the child ------------------------------------------------------------------------------
def _key(data: dict) -> PairKey:
    return PairKey(**{**data, "options": PipelineOptions(**data["options"])})


def _child_main(fd: int) -> None:
    # No PR_SET_PDEATHSIG here (isolation._die_with_parent): it fires when the *thread* that
    # started the child ends, and a side outlives the request thread that loaded it. The
    # parent's end of stdin closes when it dies, however it dies: that ends the child.
    out = os.fdopen(fd, "w", buffering=1)
    write_lock = threading.Lock()  # OpenVINO's streamer thread and this one both write

    def send(kind: str, payload) -> None:
        with write_lock:
            out.write(json.dumps([kind, payload]) + "\n")
            out.flush()

    commands: "queue.Queue" = queue.Queue()
    cancel = threading.Event()
    cancel_seen: list = [None]  # when this run's cancel arrived (RunResult.stop_seen_at)

    def read_commands() -> None:  # in order, so a cancel always lands before the next run
        for line in sys.stdin:
            message = json.loads(line)
            if "cancel" in message:
                if not cancel.is_set():
                    cancel_seen[0] = time.perf_counter()
                cancel.set()
            else:
                commands.put(message)
        os._exit(0)  # the parent closed our stdin (it is gone): stop even inside a prefill

    threading.Thread(target=read_commands, daemon=True).start()
    load = commands.get()["load"]
    try:
        runner = build_side(_key(load["key"]), load["side"], lambda m: send("status", m), warmup=load["warmup"])
    except DemoError as e:
        send("error", str(e))
        return
    except Exception as e:
        send("error", unexpected(f"loading the {load['side']} pipeline", e))
        return
    send("ready", None)
    known = {f.name for f in fields(RunResult)}
    while True:
        message = commands.get()
        cancel.clear()
        cancel_seen[0] = None
        run = message["run"]

        def on_chunk(chunk: Chunk) -> bool:
            send("chunk", {"token_ids": list(chunk.token_ids), "text": chunk.text,
                           "accepted_text": chunk.accepted_text, "t": chunk.t})
            return not cancel.is_set()

        try:
            result = runner.run(run["prompt"], GenerationSettings(**run["settings"]), on_chunk,
                                lambda t: send("start", t))
        except DemoError as e:
            send("error", str(e))
            continue
        except Exception as e:  # a bug: the side fails with the usual sentence, the child lives on
            send("error", unexpected(f"the {load['side']} side", e))
            continue
        if cancel.is_set():
            result.stop_seen_at = cancel_seen[0]
        send("done", {k: v for k, v in asdict(result).items() if k in known and k != "chunks"})


if __name__ == "__main__":
    _child_main(int(sys.argv[1]))
