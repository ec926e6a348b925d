"""Stand-ins that really crash, run in the child processes of demo.core.isolation.

$CRASH_ON names a model folder and a thread count ("<folder name>|<threads or default>"):
compiling that configuration kills the child with a real SIGFPE, as OpenVINO's CPU plugin
does for an f16 main with one thread on an AMX Xeon. Every other configuration runs the
real code. Each crash appends a line to $CRASH_LOG, so a test can count them. With
$NO_PRUNING set, calibration measures every format whole: no format is skipped on its
timings, which a busy machine shifts, so the crashing stage is always reached.
"""

import os
import signal
from pathlib import Path

from demo.calibrate import stages as calibration_stages
from demo.calibrate.stages import measure_overhead  # noqa: F401  (stages run from here)
from demo.engine import native_guard
from demo.engine.stateful import StatefulModel


def _crash_if_chosen(folder, threads) -> None:
    if os.environ.get("CRASH_ON") == f"{Path(folder).name}|{threads or 'default'}":
        with open(os.environ["CRASH_LOG"], "a") as log:
            log.write(f"{Path(folder).name}|{threads}\n")
        os.kill(os.getpid(), signal.SIGFPE)


class CrashingModel(StatefulModel):
    def __init__(self, folder, threads):
        _crash_if_chosen(folder, threads)
        super().__init__(folder, threads)


def smoke_test(args, send):
    _crash_if_chosen(args["folder"], args["threads"])
    return native_guard.smoke_test(args, send)


def _with_crashes(stage):
    def run(args, send):
        from demo.calibrate import measure

        measure.StatefulModel = CrashingModel
        if os.environ.get("NO_PRUNING"):
            calibration_stages.cost_model.dominated = lambda *a, **k: False
        return stage(args, send)
    return run


measure_drafts = _with_crashes(calibration_stages.measure_drafts)
measure_main = _with_crashes(calibration_stages.measure_main)
measure_plain = calibration_stages.measure_plain  # real pipelines; a recorded crash is left out by the stage


def segfault(args, send):
    """A crash through ctypes: reading address 0."""
    import ctypes

    send("about to crash")
    ctypes.string_at(0)


def sleep_forever(args, send):
    import time

    send("sleeping")
    time.sleep(3600)


def answer(args, send):
    send("working")
    return {"doubled": args["x"] * 2}


def fail(args, send):
    raise ValueError("a Python error in the child")


def pid_then_sleep(args, send):
    import os
    import time

    send(str(os.getpid()))
    time.sleep(3600)


def priority(args, send):
    """This child's nice value and its session's autogroup line ("" where the kernel has none)."""
    try:
        autogroup = Path("/proc/self/autogroup").read_text().strip()
    except OSError:
        autogroup = ""
    return {"nice": os.nice(0), "autogroup": autogroup, "session_leader": os.getsid(0) == os.getpid()}
