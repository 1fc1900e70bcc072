"""Admission to the wake queue: reservations, senders waiting for a slot, overflows.

Design rule "Wake admission is bounded": at most ``WAKE_QUEUE_SIZE`` wakes wait
behind the running turns. Intake reserves a waiting slot before it commits new work;
new work arriving at a full queue may wait a little for a slot (parked, no CPU),
then is refused; a wake that still overflows is logged and recorded durably. Used by
the wake actor (:mod:`taskplane.actors.wake`), which owns the queue.

Log events: ``a2a_wake_overflow``, ``a2a_wake_overflow_evidence_failed``.
"""

from __future__ import annotations

import logging
from collections import deque

import trio

from taskplane.actors.owner_client import OwnerClient
from taskplane.actors.wake_queue import Reservation, Wake, WakeQueue
from taskplane.errors import TaskplaneError

log = logging.getLogger("taskplane.actors.wake")

ADMISSION_WAIT_S = 1.0
"""Seconds a send of new work may wait for a free waiting slot before its 503."""

MAX_ADMISSION_WAITERS = 128
"""Sends that may wait for a slot at once; beyond that new work is refused at once."""

MAX_OVERFLOW_BACKLOG = 1024
"""Overflowed wakes buffered for their durable record; beyond that a wake is left
accepted and unwoken, so the next start replays it."""


class WakeAdmission:
    """Who may join ``queue``, and what becomes of a wake that cannot.

    Args:
        queue: the wake queue (owned by the wake actor).
        owners: the typed client of the per-task owners (overflow records).
    """

    def __init__(self, queue: WakeQueue, owners: OwnerClient) -> None:
        self.queue = queue
        self.owners = owners
        self.overflows = 0
        self._room = trio.lowlevel.ParkingLot()
        self._overflowed: deque[Wake] = deque()
        self._overflow_ready = trio.Event()

    def reserve(self) -> Reservation | None:
        """Hold a waiting slot for an acceptance about to commit (``None``: full)."""
        return Reservation(self.queue) if self.queue.reserve() else None

    def signal_room(self) -> None:
        """Wake as many senders waiting in :meth:`reserve_within` as slots are free."""
        free = self.queue.limit - self.queue.waiting
        if free > 0 and self._room.statistics().tasks_waiting:
            self._room.unpark(count=free)

    @property
    def waiters(self) -> int:
        """Senders waiting for a slot now."""
        return self._room.statistics().tasks_waiting

    @property
    def waiters_full(self) -> bool:
        """``MAX_ADMISSION_WAITERS`` senders already wait for a slot."""
        return self._room.statistics().tasks_waiting >= MAX_ADMISSION_WAITERS

    async def reserve_within(self, timeout_s: float = ADMISSION_WAIT_S) -> Reservation | None:
        """:meth:`reserve`, waiting at most ``timeout_s`` seconds for a free slot.

        ``None`` at the deadline, or at once when ``MAX_ADMISSION_WAITERS`` already
        wait. A parked sender costs no CPU, so new work arriving at a full queue waits
        here instead of being refused and re-sent in a loop by clients that ignore
        ``Retry-After``: refusals do not starve the agent's turns, and each slot the
        agent frees goes to a waiting sender (nothing is recorded or acknowledged while
        waiting). Cancelling stops the wait.
        """
        reservation = self.reserve()
        if reservation is not None or self.waiters_full:
            return reservation
        with trio.move_on_after(timeout_s):
            while reservation is None:
                await self._room.park()
                reservation = self.reserve()
        return reservation

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
