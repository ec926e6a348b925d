"""What the deployments send each other besides the engine's own events.

A race on the cluster streams the same events as Arena.run in one process (StatusEvent,
StartEvent, ChunkEvent, DoneEvent, pickled by Ray). One thing has no event of its own: a
side that refuses the request before generating (the prompt does not fit, the models
cannot be loaded). In one process that is a DemoError raised before either side starts;
here it is a Refusal that the race forwards and RemoteArena raises as that DemoError.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Refusal:
    """A side refused the request before it started generating: `message` is for the user."""

    side: str
    message: str


def placement(node_id: Optional[str], threads: Optional[int], host: Optional[str] = None) -> str:
    """Where a side ran, in words: "host (node 1a2b3c4d), 1 thread"."""
    host = host or socket.gethostname()
    node = f" (node {node_id[:8]})" if node_id else ""
    if threads is None:
        return f"{host}{node}, OpenVINO's default threads"
    return f"{host}{node}, {threads} thread{'s' if threads != 1 else ''}"
