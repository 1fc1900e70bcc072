"""The leader actor (taskplane.cluster.leader) on virtual time: one term at a time,
renewals that fail cancel the child before the lease could expire, a lease that moved
or a fenced write ends the term, and the next term has a higher epoch.

The leases are an in-memory model of the PostgreSQL ones (the SQL's own behaviour,
contention and expiry on ``now()``, is tested against the real server in
``tests/store/test_postgres_cluster.py``); its "database time" is trio's clock, so
``expires_at`` and the child's cancellation compare on one clock.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
import trio.lowlevel
import trio.testing

from taskplane.cluster.counters import ClusterCounters
from taskplane.cluster.leader import Leadership, Term
from taskplane.errors import Fenced, StoreUnavailable
from taskplane.sources.runtime import Context

TTL = 15.0


@attrs.define
class Lease:
    node_id: str
    epoch: int
    expires_at: float


@attrs.define
class LeaseTable:
    """The ``leases`` table, on trio's clock."""

    rows: dict[str, Lease] = attrs.Factory(dict)

    def acquire(self, name: str, node_id: str, ttl_s: float) -> int | None:
        now = trio.current_time()
        row = self.rows.get(name)
        if row is not None and row.expires_at > now and row.node_id != node_id:
            return None
        epoch = 1 if row is None else row.epoch + 1
        self.rows[name] = Lease(node_id, epoch, now + ttl_s)
        return epoch

    def renew(self, name: str, node_id: str, epoch: int, ttl_s: float) -> bool:
        now = trio.current_time()
        row = self.rows.get(name)
        if row is None or (row.node_id, row.epoch) != (node_id, epoch) or row.expires_at <= now:
            return False
        row.expires_at = now + ttl_s
        return True


@attrs.define
class NodeLeases:
    """One node's view of the table; ``down`` makes every call fail, ``hang`` makes
    every call wait forever (a server that stopped answering)."""

    table: LeaseTable
    node_id: str
    down: bool = False
    hang: bool = False
    released: list[int] = attrs.Factory(list)

    async def _reach(self) -> None:
        await trio.lowlevel.checkpoint()
        if self.hang:
            await trio.sleep_forever()
        if self.down:
            raise StoreUnavailable("the database cannot be reached")

    async def acquire(self, name: str, ttl_s: float) -> int | None:
        await self._reach()
        return self.table.acquire(name, self.node_id, ttl_s)

    async def renew(self, name: str, epoch: int, ttl_s: float) -> bool:
        await self._reach()
        return self.table.renew(name, self.node_id, epoch, ttl_s)

    async def release(self, name: str, epoch: int) -> None:
        await self._reach()
        row = self.table.rows.get(name)
        if row is not None and (row.node_id, row.epoch) == (self.node_id, epoch):
            row.expires_at = trio.current_time()
            self.released.append(epoch)


@attrs.define
class Terms:
    """What each term of a child did: (node, epoch, started at, ended at)."""

    log: list[list[Any]] = attrs.Factory(list)
    current: dict[str, Term] = attrs.Factory(dict)

    def child(self, node_id: str) -> Any:
        async def run(term: Term, *, task_status: trio.TaskStatus[None]) -> None:
            entry: list[Any] = [node_id, term.fence.epoch, trio.current_time(), None]
            self.log.append(entry)
            self.current[node_id] = term
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                entry[3] = trio.current_time()

        return run

    def running(self) -> list[list[Any]]:
        return [e for e in self.log if e[3] is None]


async def test_two_contenders_get_one_leader_and_the_other_takes_over_when_it_stops(
    autojump_clock: trio.testing.MockClock,
) -> None:
    table, terms = LeaseTable(), Terms()
    a, b = NodeLeases(table, "node-a"), NodeLeases(table, "node-b")
    a_scope = trio.CancelScope()
    async with trio.open_nursery() as nursery:

        async def lead_a(*, task_status: trio.TaskStatus[None]) -> None:
            with a_scope:
                await Leadership(a, TTL).lead(
                    "source:relay", terms.child("node-a"), task_status=task_status
                )

        await nursery.start(lead_a)
        await nursery.start(Leadership(b, TTL).lead, "source:relay", terms.child("node-b"))
        await trio.sleep(10 * TTL)  # many renewals: the leader keeps its lease
        assert [e[:2] for e in terms.log] == [["node-a", 1]]
        assert [e[0] for e in terms.running()] == ["node-a"]

        a_scope.cancel()  # node-a stops: its lease is released, node-b takes over
        stopped = trio.current_time()
        await trio.sleep(TTL / 3 + 0.1)
        assert a.released == [1]
        assert [e[:2] for e in terms.running()] == [["node-b", 2]]
        assert terms.log[1][2] - stopped <= TTL / 3 + 0.1  # no wait for the expiry
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("failure", ["down", "hang"])
async def test_a_renewal_that_cannot_succeed_cancels_the_child_before_the_lease_can_move(
    autojump_clock: trio.testing.MockClock, failure: str
) -> None:
    table, terms = LeaseTable(), Terms()
    a, b = NodeLeases(table, "node-a"), NodeLeases(table, "node-b")
    async with trio.open_nursery() as nursery:
        await nursery.start(Leadership(a, TTL).lead, "maintenance", terms.child("node-a"))
        await trio.sleep(TTL)
        await nursery.start(Leadership(b, TTL).lead, "maintenance", terms.child("node-b"))
        setattr(a, failure, True)  # node-a is cut off from the database
        expires_at = table.rows["maintenance"].expires_at
        await trio.sleep(2 * TTL)
        first, second = terms.log
        assert first[:2] == ["node-a", 1] and second[:2] == ["node-b", 2]
        assert first[3] is not None and first[3] < expires_at  # cancelled before expiry
        assert expires_at - first[3] == pytest.approx(0.2 * TTL)  # by the margin
        assert second[2] >= expires_at  # node-b took over only after the expiry
        assert terms.running() == [second]
        nursery.cancel_scope.cancel()


async def test_a_lease_that_moved_ends_the_term_at_the_next_renewal(
    autojump_clock: trio.testing.MockClock,
) -> None:
    table, terms = LeaseTable(), Terms()
    a = NodeLeases(table, "node-a")
    counters = ClusterCounters()
    async with trio.open_nursery() as nursery:
        await nursery.start(Leadership(a, TTL, counters).lead, "deliverer", terms.child("node-a"))
        table.rows["deliverer"] = Lease("node-b", 2, trio.current_time() + 10 * TTL)  # moved
        moved = trio.current_time()
        await trio.sleep(TTL)
        assert len(terms.log) == 1 and terms.log[0][3] is not None
        assert terms.log[0][3] - moved <= TTL / 3 + 0.01  # the first renewal noticed
        assert terms.running() == []  # node-a follows, and competes again
        table.rows["deliverer"].expires_at = trio.current_time()
        await trio.sleep(TTL / 3 + 0.01)
        assert [e[:2] for e in terms.running()] == [["node-a", 3]]
        assert counters.leader_terms == 2  # both of node-a's terms, for /metrics
        nursery.cancel_scope.cancel()


async def test_a_fenced_checkpoint_write_deposes_the_sources_term_and_a_new_epoch_starts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    table, terms = LeaseTable(), Terms()
    a = NodeLeases(table, "node-a")

    saved: list[object] = []

    class Services:
        async def save_checkpoint(
            self, principal: str, source: str, value: object, *, fence: Any = None
        ) -> None:
            if fence.epoch == 1:
                raise Fenced("lease source:relay epoch 1 is no longer node-a's")
            saved.append((value, fence.epoch))

    async with trio.open_nursery() as nursery:
        await nursery.start(Leadership(a, TTL).lead, "source:relay", terms.child("node-a"))
        held = terms.current["node-a"]
        services: Any = Services()
        ctx = Context(plane=None, services=services, source="relay", deliverer=None, term=held)  # type: ignore[arg-type]
        with pytest.raises(Fenced):
            await ctx.save_checkpoint("p", {"cursor": 1})
        assert held.lost
        await trio.testing.wait_all_tasks_blocked()
        assert terms.log[0][3] is not None  # the term was cancelled at once
        await trio.sleep(TTL / 3 + 0.01)
        assert [e[:2] for e in terms.running()] == [["node-a", 2]]
        again = attrs.evolve(ctx, term=terms.current["node-a"])
        await again.save_checkpoint("p", {"cursor": 2})
        assert saved == [({"cursor": 2}, 2)]
        nursery.cancel_scope.cancel()


async def test_a_child_that_returns_ends_the_leadership_and_releases_the_lease(
    autojump_clock: trio.testing.MockClock,
) -> None:
    table = LeaseTable()
    a = NodeLeases(table, "node-a")

    async def once(term: Term, *, task_status: trio.TaskStatus[None]) -> None:
        task_status.started()
        await trio.sleep(TTL)

    await Leadership(a, TTL).lead("maintenance", once)
    assert a.released == [1]
    assert table.rows["maintenance"].expires_at == trio.current_time()


async def test_a_child_that_fails_to_start_raises_from_lead_and_releases_the_lease(
    autojump_clock: trio.testing.MockClock,
) -> None:
    table = LeaseTable()
    a = NodeLeases(table, "node-a")

    async def broken(term: Term, *, task_status: trio.TaskStatus[None]) -> None:
        raise ValueError("no token")

    async with trio.open_nursery() as nursery:
        with pytest.raises(ValueError, match="no token"):
            await nursery.start(Leadership(a, TTL).lead, "source:relay", broken)
    assert a.released == [1]
