"""Server-side checks of raw values from the browser or the API (as demo.web.ui does for /race):
widgets bound what a browser sends, but anyone can send None, NaN, strings or huge numbers."""

from __future__ import annotations

import math

from ..core.errors import DemoError
from ..core.settings import MAX_PROMPT_CHARS


def boolean(name: str, value) -> bool:
    # bool("false") is True: an API caller's string must not flip a setting.
    if not isinstance(value, bool):
        raise DemoError(f"The setting {name!r} must be true or false; reset it and try again.")
    return value


def number(name: str, value, low: float, high: float, integer: bool = False):
    # An int is compared exactly: math.isfinite(10**400) raises OverflowError (a raw POST can send it).
    ok = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))
    if isinstance(value, bool) or not ok or not low <= value <= high or (integer and value != int(value)):
        kind = "a whole number" if integer else "a number"
        raise DemoError(f"The setting {name!r} must be {kind} from {low:g} to {high:g}; reset it and try again.")
    return int(value) if integer else float(value)


def choice(name: str, value, choices) -> str:
    if not isinstance(value, str) or value not in choices:
        raise DemoError(f"The setting {name!r} must be one of: {', '.join(map(str, choices))}.")
    return value


def prompt(value) -> str:
    if value is not None and not isinstance(value, str):
        raise DemoError("The prompt must be text; type a question or pick an example.")
    if value is not None and len(value) > MAX_PROMPT_CHARS:
        raise DemoError(f"The prompt is {len(value):,} characters long; the limit is {MAX_PROMPT_CHARS:,}, so shorten it.")
    return value
