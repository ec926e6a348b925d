"""Who a page event comes from, and the door every queued event passes (QueueDoor).

A visitor is their address where the app can trust one, refined by their Gradio session
(which the client chooses, so a script rotates it at will: it only ever narrows a visitor):

- On a Hugging Face Space (SPACE_ID set) the peer is the platform's proxy, on a private
  address, and the visitor's address is in X-Forwarded-For. A client may write anything
  there itself, but each proxy *appends* the address it received the request from, and the
  platform's own hops are on private addresses: so the visitor is the rightmost public
  (globally routable) entry, the one the platform's edge saw. What the client wrote is to
  its left and is never read.
  An entry that is not an address stops that walk: what is left of it is the client's.
- Behind the operator's own reverse proxy (--trust-forwarded-for): the rightmost entry, the
  one that proxy appended (a booth LAN's visitors may have private addresses).
- Otherwise the peer's own address (a private one too: a booth LAN's visitor); a loopback
  peer (the operator, or a local proxy every visitor comes through) names nobody, so it
  gives no address key. uvicorn's own X-Forwarded-For trust is off (demo.web.site), so a
  loopback peer cannot name an address by writing one.

An IPv6 visitor is their /64; repeated X-Forwarded-For headers are read as one list, in order.

The door (QueueDoor.install) sits in Gradio's Queue.push, where every queued event, from
the page, gradio_client or a raw POST (by api_name or by fn_index, private or not), is
accepted or refused before it takes a place in line. A heavy event (race, fair, three-way,
chat turn and the step view after a race, replay, benchmark) takes its visitor's one claim
(demo.engine.admission.Admission.claim) there, held until Gradio forgets the event; a
second one is refused with HTTP 429 and a sentence. Every lane (concurrency id) may hold
only so many waiting events, one visitor at most half of a lane and visitors without a
trustworthy address together at most half, counted wherever their events are, so no lane and
no rotating script fills Gradio's one line (queue max_size) that every other event needs.
The door looks an event's handler up without its session: Gradio's own lookup keeps state
for whatever session a body names, refused or not.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from typing import Optional, Union

from ..core.errors import DemoError
from ..engine.admission import Admission, Ticket, VisitorBusy

SPACE_ENV = "SPACE_ID"  # set by Hugging Face Spaces in every Space's container
SCOPE_KEY = "arena.claim"  # where the door leaves an event's claim for its handler (the ASGI scope)
# Waiting events a lane may hold (all visitors together); a lane not named here gets DEFAULT_WAITING.
# Their sum stays under demo.web.site.MAX_QUEUE, so one lane never fills Gradio's line.
LANE_WAITING = {"race": 6, "replay": 2, "bench": 1}
DEFAULT_WAITING = 2


@dataclass(frozen=True)
class VisitorIds:
    trust_forwarded_for: bool = False  # the operator's proxy sets X-Forwarded-For; believe its last entry
    on_space: bool = False             # a Hugging Face Space: the platform's proxy sets X-Forwarded-For
    # Visitors one address stands for (--visitors-per-address): a venue whose crowd reaches a
    # Space through one NAT address gets that many jobs at once and that many times each
    # per-visitor allowance, instead of one job for the whole room.
    per_address: int = 1

    @classmethod
    def from_environment(cls, trust_forwarded_for: bool = False, per_address: int = 1) -> "VisitorIds":
        if not 1 <= per_address <= 64:
            raise DemoError(f"--visitors-per-address must be between 1 and 64, not {per_address}; "
                            "use 1 unless many visitors share one address.")
        return cls(trust_forwarded_for, on_space=bool(os.environ.get(SPACE_ENV)), per_address=per_address)

    @property
    def public(self) -> bool:
        """Whether strangers reach the page through a proxy (a Space, or the operator's own)."""
        return self.on_space or self.trust_forwarded_for

    def address(self, host: Optional[str], forwarded_for: Optional[str]) -> Optional[str]:
        """The visitor's address, or None where no address can be trusted to name them.
        An IPv6 visitor is their /64 (one household or one host's whole range, as ISPs assign)."""
        entries = [e.strip() for e in (forwarded_for or "").split(",") if e.strip()]
        if self.on_space:
            # Right to left through the hops the platform appended (private ones), to the first
            # public one; an entry that is not an address is the client's own writing: stop there.
            for entry in reversed(entries):
                parsed = _parse(entry)
                if parsed is None:
                    return None
                if parsed.is_global:
                    return _key(parsed)
            return None
        if self.trust_forwarded_for and entries:
            parsed = _parse(entries[-1])
            return _key(parsed) if parsed is not None else None
        parsed = _parse(host)
        return _key(parsed) if parsed is not None and not parsed.is_loopback else None

    def keys_of(self, session_hash: Optional[str], host: Optional[str],
                forwarded_for: Optional[str] = None) -> tuple:
        keys = [f"session:{session_hash}"] if session_hash else []
        address = self.address(host, forwarded_for)
        if address:
            keys.append(f"address:{address}")
        return tuple(keys)

    def keys_of_scope(self, scope: dict, session_hash: Optional[str] = None) -> tuple:
        """The keys of an ASGI request (demo.web.limits, demo.web.routes, the door)."""
        client = scope.get("client") or (None, None)
        return self.keys_of(session_hash, client[0], forwarded_for(scope.get("headers") or ()))

    def keys(self, request) -> Union[tuple, Ticket]:
        """Whose job a handler's event is: the claim the door took for it (the handler's job runs
        under that claim), else the visitor's keys (None: called in-process, limited by nothing)."""
        if request is None:
            return ()
        scope = getattr(getattr(request, "request", None), "scope", None) or {}
        return scope.get(SCOPE_KEY) or self.keys_of_scope(scope, getattr(request, "session_hash", None))



def owner_of(visitor) -> str:
    """One key that names a visitor (whose download a file is: demo.web.files); "" for none."""
    keys = visitor.visitor if isinstance(visitor, Ticket) else tuple(visitor or ())
    return address_in(keys) or (keys[0] if keys else "")


def forwarded_for(headers) -> str:
    """Every X-Forwarded-For header of a request, in order, as one list (RFC 9110 combines
    repeated fields so): a client's own extra header can never stand in for the proxy's entries."""
    return ",".join(v.decode("latin-1") for k, v in headers if k.lower() == b"x-forwarded-for")


def address_in(keys) -> Optional[str]:
    """The `address:` key among a visitor's keys, or None."""
    return next((k for k in keys if k.startswith("address:")), None)


def address_of_scope(ids: VisitorIds, scope: dict) -> Optional[str]:
    """The `address:` key of an ASGI request, or None."""
    return address_in(ids.keys_of_scope(scope))


def _parse(entry: Optional[str]):
    try:
        return ipaddress.ip_address((entry or "").strip("[]"))
    except ValueError:
        return None  # no address, or a name (a test client): not one to key by


def _key(address) -> str:
    """An address as a visitor key: IPv4 itself (also when written IPv4-mapped), IPv6 its /64."""
    if address.version == 4:
        return str(address)
    if address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(ipaddress.ip_network(f"{address}/64", strict=False))


@dataclass
class QueueDoor:
    """Per-visitor claims and per-lane bounds, checked when Gradio's queue accepts an event."""

    ids: VisitorIds
    admission: Admission
    lane_waiting: dict = field(default_factory=lambda: dict(LANE_WAITING))
    _heavy: dict = field(default_factory=dict)       # fn index -> what its job is called
    _live: dict = field(default_factory=dict)        # event id -> (lane, its visitor's address key or None)
    _jobs: dict = field(default_factory=dict)        # event id -> address key, of heavy events of shared addresses

    def heavy(self, what: str, *events) -> None:
        """Mark events (what `.click(...)` returned) as heavy jobs that take their visitor's claim."""
        for event in events:
            self._heavy[event["id"]] = what

    def install(self, demo) -> None:
        queue = demo._queue
        real_push = queue.push

        async def push(body, request, username):
            from fastapi import HTTPException

            try:
                claim, event, owner = self._admit(queue, body, request)
            except Refused as e:
                raise HTTPException(status_code=429, detail=str(e)) from None
            ok = False
            try:
                ok, event_id, state = await real_push(body, request, username)
            finally:
                if not ok and claim is not None:
                    claim.release()
            event["id"] = event_id
            if ok and "lane" in event:
                self._live[event_id] = (event["lane"], owner)
            if ok and event.get("job"):
                self._jobs[event_id] = owner
            return ok, event_id, state

        queue.push = push

    def _admit(self, queue, body, request):
        fn = fn_of(queue, body)
        if fn is None:
            return None, {}, None  # Gradio's own push answers an unknown event
        lane = fn.concurrency_id
        keys = self.ids.keys_of_scope(request.scope, body.session_hash)
        owner = address_in(keys)
        waiting = self._waiting(queue, lane)
        events = queue.event_ids_to_events
        self._live = {e: v for e, v in self._live.items() if e in events}  # Gradio forgot the rest
        self._jobs = {e: v for e, v in self._jobs.items() if e in events}
        cap = self.lane_waiting.get(lane, DEFAULT_WAITING)
        if len(waiting) >= cap:
            raise Refused(f"{len(waiting)} requests of this kind are already waiting; try again in a minute.")
        # One visitor's events in a lane, and those of all callers without an address together, are
        # counted wherever they are: in Gradio's line, or started and waiting in the engine's
        # admission (a race handler is free to start long before the machine is). Besides the one
        # that may be running, a visitor holds at most half a lane's waiting places (one export,
        # one replay: rotating sessions change nothing), and the callers without an address
        # together half of them. (Gradio forgets a finished event a moment after its client
        # reads the answer: the running one's allowance also covers a click right after it.)
        mine = sum(v == (lane, owner) for v in self._live.values())
        if owner is None and mine >= (cap + 1) // 2 + 1:
            raise Refused("Too many requests of this kind are waiting; try again in a minute.")
        if owner is not None and mine >= max(1, cap // 2) + 1:
            raise Refused("You already have requests of this kind waiting; wait for them to finish.")
        what = self._heavy.get(fn._id)
        event: dict = {"lane": lane}  # and its id, once Gradio's push has made the event
        if what is None:
            return None, event, owner
        if self.ids.per_address > 1 and owner is not None:
            # A shared address: its jobs are counted here, and each claim binds only its session.
            jobs = sum(o == owner for o in self._jobs.values() if o is not None)
            if jobs >= self.ids.per_address:
                raise Refused(f"This address already has {jobs} jobs running or waiting, the most it may hold "
                              "at once; wait for one to finish.")
            keys = tuple(k for k in keys if k != owner)
            event["job"] = True

        def alive() -> bool:  # until Gradio forgets its event (finished, cancelled, client gone)
            return "id" not in event or event["id"] in events

        session = next((k for k in keys if k.startswith("session:")), None)
        try:
            claim = self.admission.claim(what, keys, alive=alive, successor=session)
        except VisitorBusy as e:
            raise Refused(str(e)) from None
        request.scope[SCOPE_KEY] = claim
        return claim, event, owner


    @staticmethod
    def _waiting(queue, lane) -> list:
        """The lane's events that will wait: those in its line past the handlers free to start them."""
        line = queue.event_queue_per_concurrency_id.get(lane)
        if line is None:
            return []
        free = max(0, (line.concurrency_limit or len(line.queue)) - line.current_concurrency)
        return list(line.queue)[free:]


def fn_of(queue, body):
    """The handler an event names, looked up without its session: Gradio's own lookup
    (route_utils.get_fn) builds and keeps a copy of the page's state for whatever session the
    body names, even for an event the door then refuses. None for an event it does not know."""
    fns = queue.blocks.fns
    if body.fn_index is not None:
        return fns.get(body.fn_index) if isinstance(body.fn_index, int) else None
    return None  # Gradio's push refuses an event without a function index


class Refused(Exception):
    pass
