"""The wake queue's pure state: a bounded FIFO, one offered wake, the turn authority.

No trio, no I/O: the wake actor (:mod:`taskplane.actors.wake`) drives it, and a
hypothesis state machine checks it against a model. Design document, "Wake admission
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
    """

    def __init__(self, limit: int = WAKE_QUEUE_SIZE) -> None:
        self.limit = limit
        self.pending: deque[Wake] = deque()
        self.offered: Wake | None = None
        self.authority: str | None = None

    def _known(self, wake: Wake) -> bool:
        return wake == self.offered or wake in self.pending

    def admit(self, wake: Wake) -> Admission:
        """Queue ``wake`` at the tail; a wake already pending or offered is ignored."""
        if self._known(wake):
            return "duplicate"
        if self.waiting >= self.limit:
            return "overflow"
        self.pending.append(wake)
        return "queued"

    @property
    def waiting(self) -> int:
        """Wakes waiting behind the offered one. With none offered, the head of
        ``pending`` is the next to be offered, so it does not count as waiting."""
        return len(self.pending) - (0 if self.offered is not None else 1)

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
