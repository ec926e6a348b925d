"""One user-facing error type.

Anything a user can cause (a bad prompt, an unknown preset, a missing device, missing
weights) raises DemoError with one sentence that says what happened and what to do.
The edges (CLI, web page) show that sentence; everything else is a bug and keeps its
traceback.
"""

import re


class DemoError(Exception):
    """An error whose message is meant for the person using the demo."""


class Cancelled(DemoError):
    """Someone stopped the work (Stop, a closed tab, a cancel event) before it finished;
    nothing half-done was kept."""


def run_command(body, interrupted: str = "stopped") -> int:
    """Run a command-line tool's body and turn user errors into one line and an exit code.

    DemoError -> "error: <sentence>" on stderr, exit 1; Ctrl-C -> `interrupted`, exit 130.
    Anything else is a bug and keeps its traceback.
    """
    import sys

    try:
        return body()
    except DemoError as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"\n{interrupted}", file=sys.stderr)
        return 130


# What a visitor reads in place of a bug's text: exception names, messages and paths are
# internals; the traceback goes to the server log for the operator.
UNEXPECTED = "an unexpected error stopped it (the operator finds the details in the server log)"


def unexpected(what: str, e: BaseException) -> str:
    """Log a bug in `what` with its traceback; return the words a visitor sees instead."""
    import logging

    logging.getLogger("demo").error("%s failed unexpectedly", what, exc_info=(type(e), e, e.__traceback__))
    return UNEXPECTED


# An absolute path of this machine (a cache folder, a model file), ~/ included; a trailing dot ends
# the sentence, not the path. "1/2 models" is not one (a path starts after a space or a quote).
_PATH = re.compile(r"(?<![\w.:/~])~?/(?:[^\s/'\"()\[\],;:]+/)*[^\s/'\"()\[\],;:]*[^\s/'\"()\[\],;:.]")
_FILE_NAME = re.compile(r"[\w-][\w.-]*\.[A-Za-z0-9]{1,8}")


def without_paths(text: str) -> str:
    """`text` as a visitor may read it, with no folder of this machine in it: a file's path
    becomes its name (…/openvino_model.bin: what failed, without where it lies), a folder's
    "a folder on the server". The one rule for every line the page shows (the terminal keeps
    the whole text)."""
    def shown(m: re.Match) -> str:
        last = m.group(0).rstrip("/").rsplit("/", 1)[-1]
        return f"…/{last}" if _FILE_NAME.fullmatch(last) else "a folder on the server"
    return _PATH.sub(shown, text)
