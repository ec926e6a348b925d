"""One user-facing error type.

Anything a user can cause (a bad prompt, an unknown preset, a missing device, missing
weights) raises DemoError with one sentence that says what happened and what to do.
The edges (CLI, web page) show that sentence; everything else is a bug and keeps its
traceback.
"""


class DemoError(Exception):
    """An error whose message is meant for the person using the demo."""
