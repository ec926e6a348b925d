"""Native work that may take the process down runs in a child process.

OpenVINO's CPU plugin can die in native code on some CPUs (an integer divide trap, SIGFPE,
for an f16 model with one thread on an AMX Xeon): in the app's own process that kills
every visitor's page and, at launch, crash-loops. A child runs such work instead; its death
(signal, exit, hang past a deadline) becomes a NativeCrash with one sentence, and the parent
goes on.

    result = run("demo.engine.native_guard:smoke_test", {"folder": "...", "threads": 1},
                 what="running the f16 main with 1 thread", timeout_s=120)

The child is a fresh `python -m demo.core.isolation` (not a fork of a process holding pipelines
and Gradio's threads): the target is named "module:function", its arguments and result are
JSON, and it may send progress messages, which arrive through a pipe of their own (native
libraries print to stdout and stderr; those go to a file, whose last line explains a
failure).
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from .errors import DemoError, without_paths

POLL_S = 0.2
ROOT = Path(__file__).resolve().parents[2]  # the repository: the child imports demo (and tests) from here


class NativeCrash(DemoError):
    """The child died or hung: `how` says how ("SIGFPE", "exit code 3", "no answer in 120 s")."""

    def __init__(self, what: str, how: str):
        self.what, self.how = what, how
        super().__init__(f"OpenVINO crashed ({how}) {what} on this CPU")


class NativeTimeout(NativeCrash):
    """The child outlived its deadline: on a busy machine that is no proof of a crash."""


class ChildFailed(DemoError):
    """The child's code raised: a Python failure, not a native crash (nothing is recorded)."""


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def run(target: str, args: dict, *, what: str, timeout_s: Optional[float] = None,
        on_message: Callable[[str], None] = lambda m: None, cancel: Optional[threading.Event] = None,
        checkpoint: Callable[[], None] = lambda: None, nice: int = 0):
    """Run `target(args, send)` in a child and return what it returns.

    `send(message)` in the child reaches `on_message` here. Setting `cancel` kills the child
    and raises DemoError, as does `checkpoint` raising (its exception passes through); a
    child that dies or outlives `timeout_s` raises NativeCrash; one whose code raises gives
    ChildFailed with its message. `nice` lowers the child's priority (background work).
    """
    read_fd, write_fd = os.pipe()
    log = tempfile.TemporaryFile(mode="w+b")
    try:
        child = start_child(["demo.core.isolation", target, str(write_fd), str(nice), str(os.getpid())], write_fd, log)
    finally:
        os.close(write_fd)
    try:
        child.stdin.write(json.dumps(args).encode())
        child.stdin.close()
        return _collect(child, read_fd, log, what, timeout_s, on_message, cancel, checkpoint)
    finally:
        os.close(read_fd)
        if child.poll() is None:
            kill(child)
        log.close()


def start_child(module_args: list, write_fd: int, log) -> subprocess.Popen:
    """A fresh `python -m MODULE ARGS` in a session of its own (so killing its group ends all it
    started), importing demo from this repository, its output to `log`, `write_fd` passed on."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-m", *module_args], stdin=subprocess.PIPE, stdout=log, stderr=log,
                            pass_fds=(write_fd,), start_new_session=True, env=env, cwd=str(ROOT))


def _collect(child, read_fd: int, log, what: str, timeout_s, on_message, cancel, checkpoint):
    deadline = time.monotonic() + timeout_s if timeout_s else None
    buffer = b""
    while True:
        ready, _, _ = select.select([read_fd], [], [], POLL_S)
        if ready:
            data = os.read(read_fd, 1 << 16)
            if data:
                buffer += data
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    kind, payload = json.loads(line)
                    if kind == "message":
                        on_message(payload)
                    elif kind == "result":
                        child.wait()
                        return payload
                    elif kind == "error":
                        child.wait()
                        raise ChildFailed(payload)
                continue
            # The pipe closed: the child is gone without an answer.
            code = child.wait()
            raise NativeCrash(what, describe_exit(code) + last_line(log))
        if cancel is not None and cancel.is_set():
            kill(child)
            raise DemoError("Stopped; nothing of this step was kept.")
        try:
            checkpoint()
        except BaseException:
            kill(child)
            raise
        if deadline is not None and time.monotonic() > deadline:
            kill(child)
            raise NativeTimeout(what, f"no answer within {timeout_s:.0f} s")


def kill(child) -> None:
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    child.wait()


def last_line(log) -> str:
    """The child's last line of output, when it says something (a Python fatal error, say),
    with no folder of this machine in it (it ends up in a sentence every visitor reads)."""
    try:
        log.seek(0)
        lines = [line.strip() for line in log.read().decode(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return f": {without_paths(lines[-1])[:200]}" if lines else ""


def _die_with_parent(parent: int) -> None:
    """Linux: the kernel kills this child when its parent dies (kill -9, a crash), so an app
    that is gone never leaves a measurement keeping a core busy for minutes."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the parent's finally still kills it
        return
    if os.getppid() != parent:  # it died before prctl took effect
        os._exit(1)


def lower_priority(nice: int) -> None:
    """Make this process background work: `nice` for the scheduler, and the same for its
    session's autogroup. A child is a session of its own (start_child), and where the kernel
    groups sessions (sched_autogroup_enabled, the default on most distributions) a task's
    nice only ranks it within its own session: each session gets an equal share of the cores,
    so a niced conversion would still take a core from a visitor's race."""
    os.nice(nice)
    try:
        with open("/proc/self/autogroup", "w") as f:  # raising it needs no privilege
            f.write(str(nice))
    except OSError:  # no autogroups here (not Linux, or a kernel without them): nice is enough
        pass


def _child_main(target: str, fd: int, nice: int, parent: int) -> None:
    _die_with_parent(parent)
    if nice:
        lower_priority(nice)
    out = os.fdopen(fd, "w", buffering=1)

    def send(kind: str, payload) -> None:
        out.write(json.dumps([kind, payload]) + "\n")
        out.flush()

    args = json.loads(sys.stdin.read() or "{}")
    module, _, name = target.partition(":")
    try:
        result = getattr(importlib.import_module(module), name)(args, lambda message: send("message", message))
    except DemoError as e:
        send("error", str(e))
    except Exception as e:  # the parent reports it; a traceback goes to the child's log
        import traceback

        traceback.print_exc()
        send("error", f"{type(e).__name__}: {e}")
    else:
        send("result", result)


if __name__ == "__main__":
    _child_main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
