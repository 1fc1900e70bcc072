"""The wake queue's pure state: a bounded FIFO, up to N offered wakes, their authority.

No trio, no I/O: the wake actor (:mod:`taskplane.actors.wake`) drives it, and a
hypothesis state machine checks it against a model. Design rules "Wake admission
is bounded": at most ``WAKE_QUEUE_SIZE`` wakes wait behind the offered ones (applied
by :mod:`taskplane.actors.admission`); "Wake authority begins at delivery": a Task
holds a turn's authority only while its wake is offered and granted. Turns of one
context stay in order: a wake is not offered while its Task or its context has an
offered wake or an earlier waiting one.
"""

from __future__ import annotations

from collections import deque
from typing import Literal

import attrs

from taskplane.actors.admission_limits import WAKE_QUEUE_SIZE
from taskplane.store.records import Fence


@attrs.frozen
class Wake:
    """A body-free wake: which accepted activation of which Task to offer.

    ``context_id`` (the Task's contextId, when known) orders the turns of one
    context; it is not part of the wake's identity. ``fence``: on a store shared by
    several nodes, the wake lease this node holds (every write of the turn carries
    it); ``None`` on one node. ``accepted_source`` is set only
    on a wake offered right after its activation's COMMIT (the Task's source): no
    journal record of the activation can exist yet, so its first delivery needs no
    journal read. Replayed and re-found wakes leave it ``None``.
    """

    activation_id: str
    task_id: str
    context_id: str | None = attrs.field(default=None, eq=False)
    accepted_source: str | None = attrs.field(default=None, eq=False)
    fence: Fence | None = attrs.field(default=None, eq=False)


Admission = Literal["queued", "duplicate", "overflow"]


class WakeQueue:
    """At most ``concurrency`` offered wakes plus ``limit`` waiting behind them (FIFO).

    ``authorities`` holds the Task IDs whose turns run now (the only Tasks the task
    tools accept); a Task is added by :meth:`grant` while its wake is offered and
    removed before the wake is re-offered or retired. Each Task has at most one
    offered wake.

    :meth:`offer` takes the first waiting wake whose Task and context have neither an
    offered wake nor an earlier waiting one (a continuation never overtakes its
    predecessor); wakes it skips keep their places.

    ``reserved`` counts slots held by acceptances still committing (see
    :meth:`reserve`): intake refuses new work with 503 while the queue is full, so an
    acknowledged Task is not dropped by an overflow it could have been told about.
    """

    def __init__(self, limit: int = WAKE_QUEUE_SIZE, concurrency: int = 1) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.limit = limit
        self.concurrency = concurrency
        self.reserved = 0
        self.pending: deque[Wake] = deque()
        self.offered: dict[str, Wake] = {}
        """Task ID -> its offered wake, in offer order."""
        self.authorities: set[str] = set()

    def _known(self, wake: Wake) -> bool:
        return self.offered.get(wake.task_id) == wake or wake in self.pending

    def admit(self, wake: Wake, *, reserved: bool = False, force: bool = False) -> Admission:
        """Queue ``wake`` at the tail; a wake already pending or offered is ignored.

        Args:
            reserved: ``wake`` uses a slot taken by :meth:`reserve` (it is consumed
                either way, and a reserved wake never overflows).
            force: admit even over the bound (startup replay of accepted work).
        """
        if reserved:
            self.release()
        if self._known(wake):
            return "duplicate"
        if not (reserved or force) and self.waiting >= self.limit:
            return "overflow"
        self.pending.append(wake)
        return "queued"

    def reserve(self) -> bool:
        """Hold one waiting slot for an acceptance about to commit; ``False`` if full."""
        if self.waiting >= self.limit:
            return False
        self.reserved += 1
        return True

    def release(self) -> None:
        """Give back a slot held by :meth:`reserve` (the acceptance added no wake)."""
        assert self.reserved > 0, "release() without reserve()"
        self.reserved -= 1

    @property
    def free(self) -> int:
        """Offer slots not taken (``concurrency`` minus the offered wakes)."""
        return self.concurrency - len(self.offered)

    @property
    def waiting(self) -> int:
        """Wakes waiting behind the offered ones, reserved slots included. The heads
        of ``pending`` that fill the free offer slots are the next to be offered, so
        they do not count as waiting."""
        return max(len(self.pending) - self.free, 0) + self.reserved

    @property
    def authority(self) -> str | None:
        """The Task ID of the only running turn (``None``: none, or several)."""
        return next(iter(self.authorities)) if len(self.authorities) == 1 else None

    def offer(self) -> Wake | None:
        """Offer the first eligible waiting wake (``None``: no free slot or none is
        eligible). Eligible: neither its Task nor its context has an offered wake or
        an earlier waiting one."""
        if self.free <= 0 or not self.pending:
            return None
        tasks = set(self.offered)
        contexts = {w.context_id for w in self.offered.values()} - {None}
        for index, wake in enumerate(self.pending):
            if wake.task_id not in tasks and wake.context_id not in contexts:
                del self.pending[index]
                self.offered[wake.task_id] = wake
                return wake
            tasks.add(wake.task_id)
            if wake.context_id is not None:
                contexts.add(wake.context_id)
        return None

    def _take(self, wake: Wake) -> Wake:
        assert self.offered.get(wake.task_id) == wake, "the wake is not offered"
        self.authorities.discard(wake.task_id)
        return self.offered.pop(wake.task_id)

    def grant(self, wake: Wake) -> str:
        """Give the offered ``wake``'s Task its turn's authority; return its Task ID."""
        assert self.offered.get(wake.task_id) == wake, "grant() needs an offered wake"
        self.authorities.add(wake.task_id)
        return wake.task_id

    def revoke(self, task_id: str) -> None:
        """End ``task_id``'s authority (its turn is over); its wake stays offered."""
        self.authorities.discard(task_id)

    def holds(self, task_id: str) -> bool:
        """Whether ``task_id``'s turn runs now (it holds the authority)."""
        return task_id in self.authorities

    def reoffer(self, wake: Wake) -> None:
        """Put the offered ``wake`` back at the head (its authority cleared first)."""
        self.pending.appendleft(self._take(wake))

    def reoffer_all(self) -> None:
        """Put every offered wake back at the head, in offer order (a crashed actor)."""
        for wake in reversed(list(self.offered.values())):
            self.reoffer(wake)

    def retire(self, wake: Wake) -> None:
        """Drop ``wake`` if offered (authority cleared first); otherwise nothing."""
        if self.offered.get(wake.task_id) == wake:
            self._take(wake)


@attrs.define
class Reservation:
    """One waiting slot held for an acceptance that is committing (see
    :meth:`WakeQueue.reserve`). Used by the wake it admits, or released."""

    queue: WakeQueue
    settled: bool = False

    def use(self) -> bool:
        """Take the slot for a wake; ``False`` if already used or released."""
        if self.settled:
            return False
        self.settled = True
        return True

    def release(self) -> None:
        """Give the slot back unless a wake used it (idempotent)."""
        if not self.settled:
            self.settled = True
            self.queue.release()
