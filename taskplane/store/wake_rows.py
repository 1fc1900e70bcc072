"""What a node's wake actor asks of a wake queue kept in a store shared by nodes.

Design rules "Wake admission is bounded" and "Turn authority is a lease". A backend
whose store several nodes share keeps the wake queue as rows (PostgreSQL:
:mod:`taskplane.store.postgres.wakes`) and gives each node a :class:`WakeRows`; the
cluster wake actor (:mod:`taskplane.cluster.wake`) is its only caller. Every time a
lease is judged by is the store's clock, never a node's.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol

import attrs

from taskplane.store.records import Fence, PendingActivation


def lane_of(task_id: str, context_id: str | None) -> str:
    """The lane of a Task's wakes (their order and exclusion): its contextId, else one
    of its own."""
    return context_id if context_id is not None else f"task:{task_id}"


@attrs.frozen
class Claimed:
    """A wake a node now holds a turn lease on.

    Attributes:
        fence: the lease (activation, the new epoch, the node).
        task_id, context_id: the wake's Task and its contextId.
        reclaimed: the wake was running under an expired lease (another node's, or
            this one's before it lost the lease).
        accepted_source: the Task's source when this is the first claim of a wake
            queued by its acceptance (never delivered: its first delivery needs no
            journal read, :attr:`~taskplane.actors.wake_queue.Wake.accepted_source`);
            else ``None``.
        freed_slot: the claim freed a slot of the bound (the wake held one).
    """

    fence: Fence
    task_id: str
    context_id: str | None
    reclaimed: bool
    accepted_source: str | None = None
    freed_slot: bool = False


@attrs.frozen
class QueueFigures:
    """The shared queue as one read saw it.

    Attributes:
        waiting: slots of the bound taken (wakes admitted, not yet claimed).
        paused: wakes waiting out a recovery pause, cluster-wide.
    """

    waiting: int
    paused: int


@attrs.frozen
class Renewal:
    """What one renewal of a node's leases found, by activation ID.

    Attributes:
        renewed: leases extended to ``now() + ttl``.
        busy: leases still current whose rows a write committing now holds (a
            renewal never waits behind a write: the two could wait on each other);
            not renewed this time, not lost. Any lease in neither set is lost.
    """

    renewed: frozenset[str]
    busy: frozenset[str] = frozenset()


class WakeRows(Protocol):
    """One node's access to the shared wake queue (its id and lease length are the
    implementation's). Every call is one transaction; each raises
    :class:`~taskplane.errors.StoreUnavailable` (a ``Transient``) when the store could
    not be reached, having changed nothing."""

    affinity_s: float
    """Seconds a wake another node accepted is left to that node before this one may
    claim it (design rule "A wake waits for its node"; 0: at once)."""

    async def claim(
        self, limit: int, held: Collection[str], *, figures: bool
    ) -> tuple[list[Claimed], QueueFigures | None]:
        """Claim up to ``limit`` wakes (none with 0), none in the lanes ``held`` (see
        :func:`lane_of`), and, if ``figures``, read the queue's figures (else
        ``None``)."""
        ...

    async def renew(self, fences: Sequence[Fence]) -> Renewal:
        """Renew the leases of ``fences`` still current (see :class:`Renewal`)."""
        ...

    async def complete(self, fence: Fence) -> bool:
        """Mark ``fence``'s wake done; ``False`` (nothing written): the lease was not
        current."""
        ...

    async def pause(self, fence: Fence, delay_s: float) -> bool:
        """Park ``fence``'s wake for ``delay_s`` seconds of the store's clock;
        ``False`` (nothing written): the lease was not current."""
        ...

    async def restore(self, pending: Sequence[PendingActivation]) -> int:
        """Give each of ``pending`` a wake if it has none; how many were added."""
        ...

    async def expire_own(self) -> int:
        """End this node's own leases now (its turns are gone); how many."""
        ...

    def close(self) -> None:
        """Release the node's connections (blocking; reopened on next use)."""
        ...
