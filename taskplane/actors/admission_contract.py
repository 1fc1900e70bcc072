"""Admission's contract: what intake and the HTTP edge ask, and what they are told.

Design rule "Wake admission is bounded". Two small Protocols say what admission's
callers ask: :class:`AdmissionGate` (the HTTP edge) and :class:`IntakeGate` (intake);
:class:`Verdict` is its reading of one send and :class:`AdmissionStatistics` its
figures. :class:`taskplane.actors.admission.Admission` implements both Protocols for
one process; a bound shared by several nodes (its slots kept in rows of a shared
store) is a second implementation of the same two, and must keep the guarantees
their docstrings state.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol

import attrs

from taskplane.actors.admission_limits import ADMISSION_WAIT_S
from taskplane.actors.wake_queue import Reservation
from taskplane.errors import Overloaded
from taskplane.model.types import Message, Part
from taskplane.scope import Scope
from taskplane.store.contract import TaskStore
from taskplane.store.records import A2A_SOURCE


@attrs.frozen
class Verdict:
    """Admission's reading of one send, made once and carried with it.

    Attributes:
        key: the send's dedupe identity (its provider key).
        reply: the parts of the executor's direct reply (``triage``), or ``None``:
            the send is a Task (new, continued or a duplicate). Only an A2A send
            without a ``taskId`` is triaged (design rule "Message versus Task is the
            executor's decision").
        message: the message judged (a carried verdict serves only an equal one).
    """

    key: str
    reply: tuple[Part, ...] | None
    message: Message = attrs.field(repr=False)


@attrs.frozen
class AdmissionStatistics:
    """A snapshot of admission (read by metrics and tests).

    Attributes:
        limit: waiting slots of the wake queue (``WAKE_QUEUE_SIZE``).
        waiting: slots taken now, reserved ones included.
        reserved: slots held by acceptances still committing.
        waiters: senders waiting for a slot now (at most ``MAX_ADMISSION_WAITERS``).
        queue_full, crowded, closed: the states (see
            :class:`~taskplane.actors.admission.Admission`).
        parked_bytes: request bodies held by sends waiting at the edge (bytes).
        overflows: wakes that overflowed the queue since start.
        claims_loaded: the claim index was built from the store.
    """

    limit: int
    waiting: int
    reserved: int
    waiters: int
    queue_full: bool
    crowded: bool
    closed: bool
    parked_bytes: int
    overflows: int
    claims_loaded: bool


class AdmissionGate(Protocol):
    """What the HTTP edge asks admission (:class:`~taskplane.http.early_refusal.EarlyRefusal`).

    An implementation must guarantee:

    * every member is cheap and never blocks, except :meth:`paced_refusal`;
      :attr:`crowded` and :meth:`check` do no I/O (they run for every send while the
      plane is crowded);
    * while the edge hands a judged send on (:meth:`carrying`), the plane's own check
      of an equal send returns that verdict (so ``triage`` runs once per send); what
      is carried is bounded, and dropped when the hand-on ends;
    * :meth:`refusal` refuses only certainly new work: a possible duplicate of an
      accepted send and a direct reply are never refused (a duplicate gets its prior
      answer from the store);
    * :meth:`paced_refusal` answers refusals at most ``REFUSALS_PER_S`` a second, and
      lets the send through when a waiting slot freed while it waited;
    * :meth:`park` keeps the bodies of waiting sends within ``MAX_PARKED_BYTES``.

    A bound shared by several nodes may keep the slots elsewhere (rows of a shared
    store), but must answer these from what it last read, not with a round trip.
    """

    @property
    def crowded(self) -> bool:
        """New work should wait at the edge now (cheap, synchronous)."""
        ...

    def check(self, scope: Scope, message: Message, source: str = A2A_SOURCE) -> Verdict:
        """The :class:`Verdict` on a send of ``message`` by ``scope`` (one ``triage``)."""
        ...

    def refusal(self, verdict: Verdict) -> Overloaded | None:
        """The 503 the send gets unless a slot frees (queue full and certainly new
        work), or ``None``: let it through."""
        ...

    def carrying(self, verdict: Verdict | None) -> AbstractContextManager[None]:
        """While the edge hands the send of ``verdict`` on to the app: keep it for the
        plane's check of the same send (``None``: nothing to carry)."""
        ...

    def park(self, nbytes: int) -> bool:
        """Hold ``nbytes`` of a waiting send's body; ``False`` (nothing held): over
        the bound, refuse it at once."""
        ...

    def unpark(self, nbytes: int) -> None:
        """Give back what :meth:`park` held."""
        ...

    async def paced_refusal(self, verdict: Verdict) -> Overloaded | None:
        """For the one send first in line: wait for the pace, then the 503 to answer,
        or ``None`` when a slot freed (let it through). Cancelling stops the wait."""
        ...

    def statistics(self) -> AdmissionStatistics:
        """The current figures (synchronous)."""
        ...


class IntakeGate(Protocol):
    """What intake asks admission (:class:`~taskplane.actors.intake.Intake`).

    An implementation must guarantee:

    * the bound: while every slot is taken, :meth:`reserve_now` gives ``None``; a
      :class:`~taskplane.actors.wake_queue.Reservation` holds its slot until the
      wake it admits uses it, or :meth:`release` gives it back (idempotent);
    * :meth:`reserve` waits at most ``timeout_s`` seconds, gives each freed slot to a
      waiting sender, and gives ``None`` at once once admission is closed;
    * :meth:`may_be_claimed` has no false negatives: ``False`` only for a key never
      passed to :meth:`claimed` (nor found in the store by :meth:`load_claims`);
    * :meth:`check` and :meth:`refusal_at_once` do no I/O.
    """

    def check(self, scope: Scope, message: Message, source: str = A2A_SOURCE) -> Verdict:
        """See :meth:`AdmissionGate.check`."""
        ...

    def refusal_at_once(self, verdict: Verdict) -> Overloaded | None:
        """The 503 for certainly new work while admission is closed, or ``None``."""
        ...

    def reserve_now(self) -> Reservation | None:
        """A waiting slot for an acceptance about to commit (``None``: full)."""
        ...

    async def reserve(self, timeout_s: float = ADMISSION_WAIT_S) -> Reservation | None:
        """A slot, waiting (parked) at most ``timeout_s`` seconds; ``None`` then."""
        ...

    def release(self, reservation: Reservation) -> None:
        """Give ``reservation`` back unless its wake used it; wake a waiting sender."""
        ...

    def full_error(self) -> Overloaded:
        """The 503 for new work while the wake queue is full."""
        ...

    def may_be_claimed(self, key: str) -> bool:
        """``False``: ``key`` was certainly never claimed (new work)."""
        ...

    def claimed(self, key: str) -> None:
        """``key`` was just claimed (called right after its commit)."""
        ...

    async def load_claims(self, store: TaskStore) -> None:
        """Learn every claim recorded in ``store`` (never raises)."""
        ...
