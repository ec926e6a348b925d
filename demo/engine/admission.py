"""The engine's one admission point: who may use the CPU now, and in what order.

On a 2-core box one race already fills the machine, so the engine runs one heavy job
(a race, a fair measurement, a benchmark, a calibration) at a time. Everything else a
visitor does (loading the page, reading the status, replaying a recorded run) never waits
here. Jobs are served first come, first served; a waiting job can be cancelled (Stop, tab
closed) and learns its place in line, so the page can say "2 runs ahead of you".

One visitor, one job: a job's caller claims it for its visitor (opaque keys the web layer
makes from the Gradio session and, where it knows it, the client's address) before it
waits; until the caller lets go (its run ended, Stop, tab closed), any other claim naming
one of those keys is refused with a sentence, so one client cannot fill the line that
everyone shares. The page takes that claim where Gradio accepts the event
(demo.web.visitors.QueueDoor), with `alive` telling when Gradio has forgotten it, and runs the
event's jobs under it (a held Ticket passed as the visitor).

A slot is held by the job's worker threads, not by the generator a web handler iterates:
closing that generator (Stop) only asks the workers to stop, and the slot is released when
the last of them has really returned, so the next visitor's clock never counts the end
of someone else's run.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Sequence, Union

from ..core.errors import Cancelled, DemoError

POLL_S = 0.2  # how often a waiting job checks its stop flag and its place in line


class QueueFull(DemoError):
    pass


class VisitorBusy(DemoError):
    """The visitor already has a job waiting or running."""


@dataclass
class Ticket:
    number: int
    what: str
    since: float
    _admission: "Admission"
    _released: bool = False
    visitor: tuple = ()  # a claim's: the keys of the visitor it is for, free again at release
    alive: Optional[Callable[[], bool]] = None  # a claim's: False once its job has ended unseen
    successor: Optional[str] = None  # a claim's: the key a newer claim may take it over by, after give_way
    _giving_way: bool = False

    def give_way(self) -> None:
        """The claim's heavy part is over (a race's step view may follow): a new claim naming
        `successor` (the same session's next race) is admitted, and this job is superseded."""
        self._giving_way = True

    def release(self) -> None:
        """Give the slot back (idempotent: a Stop and the normal end may both call it)."""
        self._admission._release(self)


def holding(ticket: Ticket, start: Callable[[], Iterator]) -> Iterator:
    """The events of `start()`, run in `ticket`'s slot: once they exist their own on_finished
    gives the slot back; if starting fails, or the consumer leaves first, it is given back here."""
    started = False
    try:
        events = start()
        started = True
        yield from events
    finally:
        if not started:
            ticket.release()


class Admission:
    def __init__(self, max_waiting: int = 8):
        self.max_waiting = max_waiting
        self._cond = threading.Condition()
        self._waiting: deque[Ticket] = deque()
        self._holder: Optional[Ticket] = None
        self._numbers = itertools.count(1)
        self._visitors: dict[str, Ticket] = {}  # visitor key -> its claim

    def claim(self, what: str, visitor: Sequence[str], alive: Optional[Callable[[], bool]] = None,
              successor: Optional[str] = None) -> Ticket:
        """Hold one job for a visitor: refused with a sentence (VisitorBusy) while a claim with
        one of its keys is held. The claim takes no slot; release it when the caller is done
        with the job (its stream ended, Stop, tab closed), whether or not it ever got the slot.
        A cluster's page claims the same way (its runs wait in the replicas' queues)."""
        with self._cond:
            # Claims whose job ended unseen (Gradio finished or dropped the event) are forgotten
            # here, all of them: a script rotating sessions leaves no key behind.
            for held in {id(t): t for t in self._visitors.values()}.values():
                if held.alive is not None and not held.alive():
                    self._forget_visitor(held)
            busy = next((self._visitors[k] for k in visitor if k in self._visitors), None)
            if busy is not None and not (busy._giving_way and busy.successor in visitor):
                raise VisitorBusy(f"You already have {busy.what} running or waiting; wait for it to finish "
                                  "or press Stop.")
            ticket = Ticket(next(self._numbers), what, time.monotonic(), self, visitor=tuple(visitor),
                            alive=alive, successor=successor)
            self._visitors.update(dict.fromkeys(ticket.visitor, ticket))
            return ticket

    @contextlib.contextmanager
    def visiting(self, what: str, visitor: Union[Sequence[str], Ticket]) -> Iterator[Ticket]:
        """The visitor's claim (above) for the duration of a `with` block; a claim the caller
        already holds for this job (a Ticket) covers it, and stays the caller's to release."""
        if isinstance(visitor, Ticket):
            yield visitor
            return
        claim = self.claim(what, visitor)
        try:
            yield claim
        finally:
            claim.release()

    def enter(self, what: str, stop: Optional[threading.Event] = None,
              status: Callable[[str], None] = lambda m: None, timeout_s: Optional[float] = None) -> Ticket:
        """Wait for the slot in arrival order; return the held Ticket.

        Raises Cancelled when `stop` is set while waiting, QueueFull when too many wait.
        """
        return self._enter(what, stop, status, timeout_s, first=False)

    def follow_up(self, what: str, stop: Optional[threading.Event] = None,
                  status: Callable[[str], None] = lambda m: None) -> Ticket:
        """A finished job's short, bounded sequel (the step view after a race): it goes to the
        head of the line, so it runs next rather than after every visitor who came meanwhile,
        and a full line never refuses it. The job's own slot is already given back (by its
        workers), so a job granted in that instant may still run first."""
        return self._enter(what, stop, status, None, first=True)

    def _enter(self, what: str, stop: Optional[threading.Event], status: Callable[[str], None],
               timeout_s: Optional[float], first: bool) -> Ticket:
        with self._cond:
            if not first and len(self._waiting) >= self.max_waiting:
                raise QueueFull(
                    f"{len(self._waiting)} runs are already waiting for this machine; try again in a minute."
                )
            ticket = Ticket(next(self._numbers), what, time.monotonic(), self)
            if first:
                self._waiting.appendleft(ticket)
            else:
                self._waiting.append(ticket)
            last_ahead = None
            try:
                while True:
                    if self._holder is None and self._waiting[0] is ticket:
                        self._waiting.popleft()
                        self._holder = ticket
                        return ticket
                    if stop is not None and stop.is_set():
                        raise Cancelled("Stopped before the run started.")
                    if timeout_s is not None and time.monotonic() - ticket.since > timeout_s:
                        raise DemoError("The machine stayed busy for too long; try again in a minute.")
                    ahead = self._waiting.index(ticket) + (self._holder is not None)
                    if ahead != last_ahead:
                        last_ahead = ahead
                        busy = f" ({self._holder.what} running)" if self._holder else ""
                        status(f"waiting for the machine: {ahead} run{'s' if ahead != 1 else ''} ahead of you{busy}")
                    self._cond.wait(POLL_S)
            except BaseException:
                if ticket in self._waiting:
                    self._waiting.remove(ticket)
                    self._cond.notify_all()
                raise

    def _release(self, ticket: Ticket) -> None:
        with self._cond:
            if ticket._released:
                return
            ticket._released = True
            self._forget_visitor(ticket)
            if self._holder is ticket:
                self._holder = None
                self._cond.notify_all()

    def _forget_visitor(self, ticket: Ticket) -> None:
        for key in ticket.visitor:
            if self._visitors.get(key) is ticket:
                del self._visitors[key]

    def claims(self) -> int:
        """How many visitor keys hold a claim now (bounded by the jobs alive)."""
        with self._cond:
            return len(self._visitors)

    def state(self) -> dict:
        """What the page shows: what runs now, and how many wait."""
        with self._cond:
            return {
                "running": self._holder.what if self._holder else None,
                "waiting": len(self._waiting),
            }
