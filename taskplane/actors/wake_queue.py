"""The wake queue's pure state: a bounded FIFO, one offered wake, the turn authority.

No trio, no I/O: the wake actor (:mod:`taskplane.actors.wake`) drives it, and a
hypothesis state machine checks it against a model. Design rules "Wake admission
is bounded": at most ``WAKE_QUEUE_SIZE`` wakes wait behind the offered one.
"""

from __future__ import annotations

from collections import deque
from typing import Literal

import attrs

WAKE_QUEUE_SIZE = 128


@attrs.frozen
class Wake:
    """A body-free wake: which accepted activation of which Task to offer."""

    activation_id: str
    task_id: str


Admission = Literal["queued", "duplicate", "overflow"]


class WakeQueue:
    """At most one offered wake plus ``limit`` waiting behind it (FIFO).

    ``authority`` is the Task ID whose turn is running (the only Task the task tools
    accept); it is set only while a wake is offered and cleared before the next one.

    ``reserved`` counts slots held by acceptances still committing (see
    :meth:`reserve`): intake refuses new work with 503 while the queue is full, so an
    acknowledged Task is not dropped by an overflow it could have been told about.
    """

    def __init__(self, limit: int = WAKE_QUEUE_SIZE) -> None:
        self.limit = limit
        self.reserved = 0
        self.pending: deque[Wake] = deque()
        self.offered: Wake | None = None
        self.authority: str | None = None

    def _known(self, wake: Wake) -> bool:
        return wake == self.offered or wake in self.pending

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
    def waiting(self) -> int:
        """Wakes waiting behind the offered one, reserved slots included. With none
        offered, the head of ``pending`` is the next to be offered, so it does not
        count as waiting."""
        queued = len(self.pending) - (0 if self.offered is not None else 1)
        return max(queued, 0) + self.reserved

    def offer(self) -> Wake | None:
        """Move the head to *offered* (``None`` if empty or one is already offered)."""
        if self.offered is not None or not self.pending:
            return None
        self.offered = self.pending.popleft()
        return self.offered

    def grant(self) -> str:
        """Give the offered wake's Task the turn's authority; return its Task ID."""
        assert self.offered is not None, "grant() needs an offered wake"
        self.authority = self.offered.task_id
        return self.authority

    def reoffer(self) -> None:
        """Put the offered wake back at the head (authority cleared first)."""
        assert self.offered is not None, "reoffer() needs an offered wake"
        self.authority = None
        self.pending.appendleft(self.offered)
        self.offered = None

    def retire(self) -> None:
        """Drop the offered wake (authority cleared first)."""
        self.authority = None
        self.offered = None


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
