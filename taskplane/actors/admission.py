"""Admission: is there room for new work, and if not, does it wait or is it refused?

Design rule "Wake admission is bounded": at most ``WAKE_QUEUE_SIZE`` wakes wait
behind the running turns. This module is where that rule lives, whole:

* the *bound*: intake reserves a waiting slot before it commits new work
  (:meth:`Admission.reserve_now`); new work arriving at a full queue waits a little
  for a slot, parked (:meth:`Admission.reserve`), then is refused with 503; a wake
  that still overflows is logged and recorded durably (:meth:`Admission.overflowed`);
* the *states*: the queue is *full*; the plane is *crowded* once ``CROWDED_WAITERS``
  sends wait for a slot (new work then waits at the HTTP edge instead); admission is
  *closed* once ``MAX_ADMISSION_WAITERS`` wait (new work is refused at once);
* the *verdict* on one send (:meth:`Admission.check`): the executor's
  Message-versus-Task ``triage``, made once per send and carried in the
  :class:`~taskplane.actors.admission_contract.Verdict` (from the edge to intake too,
  :meth:`Admission.carrying`), and the claim index (a send whose identity was
  certainly never claimed is new work; a possible duplicate always reaches the store,
  which gives its prior answer);
* the *pacing* of refusals at the edge: at most ``REFUSALS_PER_S`` a second, the
  bodies of waiting sends bounded by ``MAX_PARKED_BYTES``.

Its thresholds are in :mod:`taskplane.actors.admission_limits`; what its callers ask
(:class:`~taskplane.actors.admission_contract.AdmissionGate` for the HTTP edge,
:class:`~taskplane.actors.admission_contract.IntakeGate` for intake) is in
:mod:`taskplane.actors.admission_contract`. :class:`Admission` implements both for
one process; a bound shared by several nodes is a second implementation of the same
two.

Log events: ``a2a_wake_overflow``, ``a2a_wake_overflow_evidence_failed``,
``claim_index_unavailable``.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

import trio

from taskplane.actors.admission_contract import AdmissionStatistics, Verdict
from taskplane.actors.admission_limits import (
    ADMISSION_WAIT_S,
    CROWDED_WAITERS,
    MAX_ADMISSION_WAITERS,
    MAX_CARRIED_VERDICTS,
    MAX_OVERFLOW_BACKLOG,
    MAX_PARKED_BYTES,
    REFUSALS_PER_S,
)
from taskplane.actors.claim_filter import ClaimIndex, build_filter
from taskplane.actors.owner_client import OwnerClient
from taskplane.actors.wake_queue import Reservation, Wake, WakeQueue
from taskplane.bridge.runtime import AgentRuntime
from taskplane.errors import Overloaded, TaskplaneError
from taskplane.model.types import Message
from taskplane.scope import Scope
from taskplane.store.contract import TaskStore
from taskplane.store.records import A2A_SOURCE, provider_key

log = logging.getLogger("taskplane.actors.wake")
log_intake = logging.getLogger("taskplane.actors.intake")  # the claim index is intake's


class Admission:
    """Admission to one process's wake queue: implements
    :class:`~taskplane.actors.admission_contract.AdmissionGate` and
    :class:`~taskplane.actors.admission_contract.IntakeGate`, and takes the overflows
    of the wake actor.

    Args:
        queue: the wake queue (owned by the wake actor; its ``limit`` is the bound).
        owners: the typed client of the per-task owners (overflow records).
        runtime: the agent, asked for its Message-versus-Task ``triage``.

    Synchronous members do no I/O; nothing here is shared between processes.
    """

    def __init__(self, queue: WakeQueue, owners: OwnerClient, runtime: AgentRuntime) -> None:
        self.queue = queue
        self.owners = owners
        self.runtime = runtime
        self.claims = ClaimIndex()
        self.overflows = 0
        self._room = trio.lowlevel.ParkingLot()
        self._overflowed: deque[Wake] = deque()
        self._overflow_ready = trio.Event()
        self._parked_bytes = 0
        self._next_refusal_at = 0.0
        """trio time before which no further early refusal is answered."""
        self._carried: dict[str, Verdict] = {}
        """Provider key -> the verdict of a send the edge is handing on, oldest first."""

    # -- states ---------------------------------------------------------------------

    @property
    def waiters(self) -> int:
        """Senders waiting for a slot now."""
        return self._room.statistics().tasks_waiting

    @property
    def queue_full(self) -> bool:
        """Every waiting slot of the wake queue is taken (new work cannot join it now)."""
        return self.queue.waiting >= self.queue.limit

    @property
    def crowded(self) -> bool:
        """The queue is full and at least ``CROWDED_WAITERS`` senders wait for a slot:
        more new work should wait at the HTTP edge, where it costs no CPU."""
        return self.queue_full and self.waiters >= CROWDED_WAITERS

    @property
    def closed(self) -> bool:
        """The queue is full and ``MAX_ADMISSION_WAITERS`` senders already wait for a
        slot: new work is refused at once."""
        return self.queue_full and self.waiters >= MAX_ADMISSION_WAITERS

    def statistics(self) -> AdmissionStatistics:
        """The current figures (synchronous)."""
        return AdmissionStatistics(
            limit=self.queue.limit,
            waiting=self.queue.waiting,
            reserved=self.queue.reserved,
            waiters=self.waiters,
            queue_full=self.queue_full,
            crowded=self.crowded,
            closed=self.closed,
            parked_bytes=self._parked_bytes,
            overflows=self.overflows,
            claims_loaded=self.claims.loaded,
        )

    # -- the verdict on one send ----------------------------------------------------

    def check(self, scope: Scope, message: Message, source: str = A2A_SOURCE) -> Verdict:
        """The :class:`Verdict` on a send of ``message`` by ``scope`` through ``source``.

        Calls ``triage`` once for an A2A send without a ``taskId`` (never for a
        continuation or a native event), unless the edge already judged this send: a
        verdict :meth:`carrying` keeps for an equal message is taken instead (once).
        Synchronous, no I/O.
        """
        key = provider_key(scope.tenant, scope.principal, source, message.message_id)
        carried = self._carried.pop(key, None)
        if carried is not None and carried.message == message:
            return carried
        reply = None
        if source == A2A_SOURCE and message.task_id is None:
            parts = self.runtime.triage(message)
            reply = tuple(parts) if parts is not None else None
        return Verdict(key, reply, message)

    @contextmanager
    def carrying(self, verdict: Verdict | None) -> Iterator[None]:
        """Keep ``verdict`` of a send the edge hands on to the app for the plane's
        :meth:`check` of it, until the block ends (``None``: nothing is kept). So a
        carried verdict lives no longer than its request; at most
        ``MAX_CARRIED_VERDICTS`` are kept, the oldest dropped (that send is then
        triaged again)."""
        if verdict is None:
            yield
            return
        self._carried.pop(verdict.key, None)
        self._carried[verdict.key] = verdict
        if len(self._carried) > MAX_CARRIED_VERDICTS:
            del self._carried[next(iter(self._carried))]
        try:
            yield
        finally:
            if self._carried.get(verdict.key) is verdict:
                del self._carried[verdict.key]

    def certainly_new(self, verdict: Verdict) -> bool:
        """The send is new work for the agent: no direct reply, and its identity was
        certainly never claimed (so it is no duplicate). ``False`` when unsure."""
        return verdict.reply is None and not self.claims.may_be_claimed(verdict.key)

    def refusal(self, verdict: Verdict) -> Overloaded | None:
        """The 503 for certainly new work while the queue is full (it may still wait
        for a slot), or ``None``."""
        if self.queue_full and self.certainly_new(verdict):
            return self.full_error()
        return None

    def refusal_at_once(self, verdict: Verdict) -> Overloaded | None:
        """The 503 for certainly new work while admission is closed, or ``None``.

        Such a send is refused before it reaches the intake actor, so refusing costs
        far less than accepting and never queues store work in front of the turns.
        """
        if self.closed and self.certainly_new(verdict):
            return self.full_error()
        return None

    def full_error(self) -> Overloaded:
        """The 503 for new work while the wake queue is full (``Retry-After: 1``)."""
        return Overloaded(
            f"the agent has {self.queue.limit} tasks waiting; retry shortly", retry_after_s=1
        )

    # -- slots --------------------------------------------------------------------

    def reserve_now(self) -> Reservation | None:
        """Hold a waiting slot for an acceptance about to commit (``None``: full)."""
        return Reservation(self.queue) if self.queue.reserve() else None

    async def reserve(self, timeout_s: float = ADMISSION_WAIT_S) -> Reservation | None:
        """:meth:`reserve_now`, waiting at most ``timeout_s`` seconds for a free slot.

        ``None`` at the deadline, or at once when admission is closed. A parked sender
        costs no CPU, so new work arriving at a full queue waits here instead of being
        refused and re-sent in a loop by clients that ignore ``Retry-After``; each slot
        the agent frees goes to a waiting sender (nothing is recorded or acknowledged
        while waiting). Cancelling stops the wait.
        """
        reservation = self.reserve_now()
        if reservation is not None or self.waiters >= MAX_ADMISSION_WAITERS:
            return reservation
        with trio.move_on_after(timeout_s):
            while reservation is None:
                await self._room.park()
                reservation = self.reserve_now()
        return reservation

    def release(self, reservation: Reservation) -> None:
        """Give ``reservation`` back unless its wake used it, then :meth:`signal_room`."""
        reservation.release()
        self.signal_room()

    def signal_room(self) -> None:
        """Wake as many senders waiting in :meth:`reserve` as slots are free."""
        free = self.queue.limit - self.queue.waiting
        if free > 0 and self._room.statistics().tasks_waiting:
            self._room.unpark(count=free)

    async def wait_for_room(self, timeout_s: float = ADMISSION_WAIT_S) -> bool:
        """Wait (parked) until a waiting slot is free, at most ``timeout_s`` seconds;
        ``False`` at the deadline, or at once when admission is closed. Reserves
        nothing: the send that follows reserves its slot in intake as usual."""
        reservation = await self.reserve(timeout_s)
        if reservation is None:
            return False
        reservation.release()
        return True

    # -- the edge's pacing ----------------------------------------------------------

    def park(self, nbytes: int) -> bool:
        """Hold ``nbytes`` of a body waiting at the edge; ``False`` (nothing held) when
        the waiting bodies would pass ``MAX_PARKED_BYTES``."""
        if self._parked_bytes + nbytes > MAX_PARKED_BYTES:
            return False
        self._parked_bytes += nbytes
        return True

    def unpark(self, nbytes: int) -> None:
        """Give back ``nbytes`` held by :meth:`park`."""
        self._parked_bytes -= nbytes

    async def paced_refusal(self, verdict: Verdict) -> Overloaded | None:
        """For the one send first in line at the edge (its callers take turns): wait
        until the next refusal is due (at most ``REFUSALS_PER_S`` a second), then the
        503 to answer, or ``None`` when the send may go on: no longer certainly new
        work, the queue has room, or a slot frees within ``ADMISSION_WAIT_S``.

        The carried ``verdict`` is re-read against the claim index (a duplicate may
        have been accepted meanwhile); ``triage`` is not called again.
        """
        await trio.sleep_until(self._next_refusal_at)
        error = self.refusal(verdict)  # a slot may have freed meanwhile
        if error is not None and await self.wait_for_room():
            error = None  # a slot freed while this send was first in line
        if error is not None:
            self._next_refusal_at = trio.current_time() + 1 / REFUSALS_PER_S
        return error

    # -- the claim index ------------------------------------------------------------

    def may_be_claimed(self, key: str) -> bool:
        """``False``: ``key`` was certainly never claimed (new work)."""
        return self.claims.may_be_claimed(key)

    def claimed(self, key: str) -> None:
        """``key`` was just claimed (called right after its commit)."""
        self.claims.note(key)

    async def load_claims(self, store: TaskStore) -> None:
        """Build the claim index from every claim in ``store`` (one store op).

        A store error is logged (``claim_index_unavailable``), never raised: the
        store is then asked for every refusal, as without an index.
        """
        self.claims.begin_load()
        try:
            loaded = await store.scan_claims(build_filter)
        except TaskplaneError as exc:
            self.claims.abandon_load()
            log_intake.warning(
                "claim index not loaded: %s", exc, extra={"event": "claim_index_unavailable"}
            )
            return
        self.claims.install(loaded)

    # -- overflows ------------------------------------------------------------------

    def overflowed(self, wake: Wake) -> None:
        """Log an overflowed ``wake`` and buffer it for :meth:`record_overflows`."""
        log.warning(
            "wake queue full (%d waiting); wake for task %s not admitted",
            self.queue.limit,
            wake.task_id,
            extra={
                "event": "a2a_wake_overflow",
                "taskId": wake.task_id,
                "activationId": wake.activation_id,
            },
        )
        if len(self._overflowed) < MAX_OVERFLOW_BACKLOG:
            self._overflowed.append(wake)
            self._overflow_ready.set()
        # else: left ACCEPTED without WOKEN, so startup replays it: still not lost.

    async def record_overflows(self) -> None:
        """Record each buffered overflow (see :meth:`record_overflow`), forever."""
        while True:
            await self._overflow_ready.wait()
            self._overflow_ready = trio.Event()
            while self._overflowed:
                await self.record_overflow(self._overflowed.popleft())

    async def record_overflow(self, wake: Wake) -> None:
        """Record ``WAKE_FAILED`` (attempts 0) for an overflowed wake, durably, and fail
        its Task if it never started, so its caller sees why it will not run.

        Errors are logged (``a2a_wake_overflow_evidence_failed``), never raised.
        """
        self.overflows += 1
        try:
            await self.owners.fail_overflowed(wake)
        except TaskplaneError:
            log.exception(
                "overflow evidence failed",
                extra={"event": "a2a_wake_overflow_evidence_failed", "taskId": wake.task_id},
            )
