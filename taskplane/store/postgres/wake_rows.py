"""One node's access to the wake rows (:mod:`taskplane.store.postgres.wakes`), on
sessions of its own.

Design rule "Turn authority is a lease": the lease renewals run on their own
session, so they never wait behind the claims, completions or the store actor's
batches; claims, restores and a restarted node's expiry run on a second one; a
turn's end (done or paused) is an op of the store actor's next batch when the node
gives its inbox (sharing the transaction and the COMMIT of the store's other writes:
one fewer transaction per turn), else on that second session. Each call runs in a
transaction in a worker thread (psycopg's blocking API), its COMMIT shielded from
cancellation; a session that broke is reopened on the next call (a database
restart). Calls made while a session's transaction runs share its next transaction
(group commit: turns ending at once and the claim after them commit together), each
succeeding or failing alone. Driver errors are translated where every store
translates them (:class:`~taskplane.store.postgres.database.PgConnection`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any, ClassVar, TypeVar

import attrs
import outcome
import trio

from taskplane.store.postgres import wakes
from taskplane.store.postgres.database import PgConnection
from taskplane.store.postgres.schema import Connection
from taskplane.store.records import Fence, PendingActivation
from taskplane.store.requests import StoreRequest, submit
from taskplane.store.wake_rows import Claimed, QueueFigures, Renewal

T = TypeVar("T")


@attrs.define(eq=False)
class _Call:
    """One call waiting for a transaction of its session, then its outcome."""

    op: Callable[[Connection], Any]
    result: outcome.Outcome[Any] | None = None


class _Session:
    """One session of the wake rows and the calls waiting for its next transaction."""

    def __init__(self, url: str) -> None:
        self.conn = PgConnection(url)
        self.lock = trio.Lock()
        self.waiting: list[_Call] = []

    async def run(self, op: Callable[[Connection], T]) -> T:
        """``op``'s value, run in the first transaction begun after this call (with
        every call waiting meanwhile); raises what ``op`` raised."""
        call = _Call(op)
        self.waiting.append(call)
        try:
            async with self.lock:  # FIFO: a call served by an earlier holder returns at once
                if call.result is None:
                    batch, self.waiting = self.waiting, []
                    with trio.CancelScope(shield=True):
                        results = await trio.to_thread.run_sync(
                            self.conn.run_batch, [c.op for c in batch]
                        )
                    for served, result in zip(batch, results, strict=True):
                        served.result = result
        except BaseException:
            if call in self.waiting:  # cancelled before any transaction took it: not run
                self.waiting.remove(call)
            raise
        assert call.result is not None
        value: T = call.result.unwrap()
        return value


@attrs.frozen
class _TurnEnd:
    """The op recording a turn's end: done (``delay_s`` ``None``) or paused. One
    statement that writes only if the lease is current, so alone in a batch it needs
    no transaction block (``stands_alone``)."""

    fence: Fence
    delay_s: float | None
    stands_alone: ClassVar[bool] = True

    def __call__(self, conn: Connection) -> bool:
        if self.delay_s is None:
            return wakes.complete(conn, self.fence)
        return wakes.pause(conn, self.fence, self.delay_s)


class PgWakeRows:
    """:class:`~taskplane.store.wake_rows.WakeRows` over the wake rows of the
    database at ``url``, for node ``node_id`` with leases of ``ttl_s`` seconds, other
    nodes' fresh wakes left to them for ``affinity_s`` seconds (design rule "A wake
    waits for its node"). Sessions open on first use; :meth:`close` closes them
    (blocking; they reopen if used again)."""

    def __init__(
        self,
        url: str,
        node_id: str,
        ttl_s: float,
        *,
        affinity_s: float = wakes.AFFINITY_S,
        store: trio.MemorySendChannel[StoreRequest] | None = None,
    ) -> None:
        self.node_id, self.ttl_s, self.affinity_s = node_id, ttl_s, affinity_s
        self._work = _Session(url)
        self._lease = _Session(url)
        self._store = store
        """The store actor's inbox, where turn ends commit (``None``: the work
        session)."""

    async def claim(
        self, limit: int, held: Collection[str], *, figures: bool
    ) -> tuple[list[Claimed], QueueFigures | None]:
        """Claim up to ``limit`` wakes (none with ``limit`` 0), none in the lanes
        ``held``, and if ``figures`` read the queue's figures, in one transaction (see
        :func:`wakes.claim`).

        Raises:
            StoreUnavailable: the database could not be reached; nothing was claimed.
        """
        held = tuple(held)

        def op(conn: Connection) -> tuple[list[Claimed], QueueFigures | None]:
            claimed = (
                wakes.claim(conn, self.node_id, self.ttl_s, limit, held, affinity_s=self.affinity_s)
                if limit
                else []
            )
            if not figures:
                return claimed, None
            row = conn.execute(
                "SELECT (SELECT count(activation_id) FROM wake_slots),"
                " (SELECT count(*) FROM wakes WHERE state = 'paused')"
            ).fetchone()
            assert row is not None
            return claimed, QueueFigures(int(row[0]), int(row[1]))

        return await self._work.run(op)

    async def renew(self, fences: Sequence[Fence]) -> Renewal:
        """Renew ``fences``' leases (one statement; see :func:`wakes.renew`).

        Raises:
            StoreUnavailable: the database could not be reached; nothing was renewed.
        """
        fences = tuple(fences)
        return await self._lease.run(lambda conn: wakes.renew(conn, fences, self.ttl_s))

    async def complete(self, fence: Fence) -> bool:
        """See :func:`wakes.complete` (``StoreUnavailable`` or ``ActorGone`` as
        above)."""
        return await self._end(_TurnEnd(fence, None))

    async def pause(self, fence: Fence, delay_s: float) -> bool:
        """See :func:`wakes.pause` (``StoreUnavailable`` or ``ActorGone`` as above)."""
        return await self._end(_TurnEnd(fence, delay_s))

    async def _end(self, op: _TurnEnd) -> bool:
        """A turn's end, in the store actor's next batch (or on the work session)."""
        if self._store is not None:
            return await submit(self._store, op)
        return await self._work.run(op)

    async def restore(self, pending: Sequence[PendingActivation]) -> int:
        """See :func:`wakes.restore` (``StoreUnavailable`` as above)."""
        pending = tuple(pending)
        return await self._work.run(lambda c: wakes.restore(c, pending))

    async def expire_own(self) -> int:
        """End this node's own leases at once (its wake actor restarted: no turn of
        it runs any more), so they are claimable again now; how many."""

        def op(conn: Connection) -> int:
            return conn.execute(
                "UPDATE wakes SET lease_until = now() - interval '1 millisecond'"
                " WHERE node_id = %s AND state = 'running' AND lease_until >= now()",
                (self.node_id,),
            ).rowcount

        return await self._work.run(op)

    def close(self) -> None:
        """Close both sessions (blocking; idempotent)."""
        self._work.conn.close()
        self._lease.conn.close()
