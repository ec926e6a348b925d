"""Smoke tests for the native guard's own tests, run in demo.core.isolation's children: no
OpenVINO and no heavy imports, so a child answers in a fraction of a second.

$GUARD_LOG names a file each child appends one line to, so a test can count the attempts.
"""

import os
import time


def _attempt() -> int:
    with open(os.environ["GUARD_LOG"], "a+") as log:
        log.write("attempt\n")
        log.seek(0)
        return len(log.read().splitlines())


def works(args, send):
    _attempt()
    return {"ms_per_token": 5.0}


def hangs_once(args, send):
    """The first attempt outlives any deadline (a machine busy with other work); the next answers."""
    if _attempt() == 1:
        time.sleep(3600)
    return {"ms_per_token": 5.0}


def python_error(args, send):
    _attempt()
    raise ValueError("a bug in the smoke test")


def head_accepts_nothing(args, send):
    """An EAGLE-3 head that runs beside its main but takes none of its guesses (issue 4425);
    a main alone answers as `works`."""
    _attempt()
    if args.get("main"):
        return {"ms_per_token": 5.0, "accepted": 0, "drafted": 12}
    return {"ms_per_token": 5.0}
