"""Who a page event comes from, as the opaque keys the engine's admission limits to one
heavy job each (demo.engine.admission.Admission.enter).

Every visitor has a Gradio session. Their address is used too, where the app knows it: a
peer on a public address is the visitor. A loopback or private peer is usually a reverse
proxy or a platform's load balancer (Spaces, a container network) that every visitor comes
through, so keying by it would give the whole audience one job; behind such a proxy the
operator may say to trust the address it appends to X-Forwarded-For (--trust-forwarded-for).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class VisitorIds:
    trust_forwarded_for: bool = False  # the operator's proxy sets X-Forwarded-For; believe its last entry

    def keys(self, request) -> tuple:
        """The keys of the visitor behind a gr.Request (None: called without one, e.g. in-process)."""
        if request is None:
            return ()
        forwarded = None
        if self.trust_forwarded_for:
            forwarded = (request.headers or {}).get("x-forwarded-for")
        client = getattr(request, "client", None)
        return keys_of(getattr(request, "session_hash", None), getattr(client, "host", None), forwarded)


def keys_of(session_hash: Optional[str], host: Optional[str], forwarded_for: Optional[str] = None) -> tuple:
    """`forwarded_for`: the X-Forwarded-For header, passed only when the operator trusts it;
    its last entry is the address the operator's proxy saw."""
    keys = [f"session:{session_hash}"] if session_hash else []
    if forwarded_for:
        entries = [e.strip() for e in forwarded_for.split(",") if e.strip()]
        address = entries[-1] if entries else None
    else:
        address = host if _public(host) else None
    if address:
        keys.append(f"address:{address}")
    return tuple(keys)


def _public(host: Optional[str]) -> bool:
    try:
        ip = ipaddress.ip_address(host or "")
    except ValueError:
        return False  # no address, or a name (a test client): not one to key by
    return ip.is_global  # not loopback, private, link-local, shared (100.64/10) or reserved
