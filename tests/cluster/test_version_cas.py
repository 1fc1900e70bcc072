"""One writer per Task across nodes: ``apply`` is a compare-and-swap on the Task's
version, and owner(T) on a node whose snapshot is stale catches up, decides again
with the same pure change and retries, a bounded number of times (design rule "One
writer per Task"). Two stores on one PostgreSQL database stand for two nodes."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio

from taskplane.actors import logic
from taskplane.actors.owner import MAX_WRITE_ATTEMPTS, TaskOwner
from taskplane.errors import TaskNotCancelable, VersionConflict
from taskplane.model.types import StreamResponse, Task
from taskplane.store.contract import TaskStore
from taskplane.store.postgres.store import PgStore
from taskplane.store.records import Accepted, StoredTask, TaskChange
from tests.store.backends import open_pg_store
from tests.store.contract import (
    COMPLETED,
    INPUT_REQUIRED,
    LOCATOR,
    NOW,
    WORKING,
    activation,
    asking,
    moved,
    stored_of,
)
from tests.support.pg import Cluster


def clock() -> int:
    return NOW + 10


async def test_a_stale_owner_catches_up_decides_again_and_commits(pg_cluster: Cluster) -> None:
    url = pg_cluster.fresh_store_url()
    async with open_pg_store(url) as one, open_pg_store(url) as two:
        created = stored_of(await one.accept(activation("m-1"), LOCATOR, NOW))
        on_a, on_b = TaskOwner(created.task.id, one, clock), TaskOwner(created.task.id, two, clock)
        await on_a.load()
        await on_b.load()
        frames = await on_a.subscribe(None)
        assert (await frames.receive()).task == created.task

        await on_b.mutate(lambda t: moved(t, WORKING, NOW + 1), None)  # node B writes v2
        seen: list[Task] = []

        def complete(task: Task) -> Task:
            seen.append(task)
            return moved(task, COMPLETED, NOW + 2)

        after = await on_a.mutate(complete, None)  # A decided on v1: conflict, retry on v2
        assert [t.status.state for t in seen] == [created.task.status.state, WORKING]
        assert after.version == 3 and after.task.status.state is COMPLETED
        assert await one.find_task(created.task.id) == after
        states = [f.status_update.status.state async for f in frames if f.status_update]
        assert states == [WORKING, COMPLETED]  # B's commit shown on A first, in order


async def test_a_state_change_caught_up_from_another_node_is_logged_as_committed_elsewhere(
    pg_cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    url = pg_cluster.fresh_store_url()
    caplog.set_level(logging.DEBUG, logger="taskplane.actors.owner")
    async with open_pg_store(url) as one, open_pg_store(url) as two:
        created = stored_of(await one.accept(activation("m-1"), LOCATOR, NOW))
        on_a, on_b = TaskOwner(created.task.id, one, clock), TaskOwner(created.task.id, two, clock)
        await on_a.load()
        await on_b.load()
        await on_b.mutate(lambda t: moved(t, WORKING, NOW + 1), None)  # committed on B
        await on_a.catch_up(2)  # A sees B's commit
        changes = [
            (r.levelno, r.committed)  # type: ignore[attr-defined]
            for r in caplog.records
            if getattr(r, "event", "") == "task_state_changed"
        ]
        assert changes == [(logging.INFO, "here"), (logging.DEBUG, "elsewhere")]


async def test_a_decision_refused_on_the_new_version_is_the_callers_error(
    pg_cluster: Cluster,
) -> None:
    url = pg_cluster.fresh_store_url()
    async with open_pg_store(url) as one, open_pg_store(url) as two:
        created = stored_of(await one.accept(activation("m-1"), LOCATOR, NOW))
        on_a, on_b = TaskOwner(created.task.id, one, clock), TaskOwner(created.task.id, two, clock)
        await on_a.load()
        await on_b.load()

        canceled = await on_b.mutate(lambda t: logic.canceled(t, NOW + 1), None)
        with pytest.raises(TaskNotCancelable):
            await on_a.mutate(lambda t: logic.canceled(t, NOW + 2), None)
        assert on_a.stored == canceled  # caught up with B's cancel
        assert await one.find_task(created.task.id) == canceled


class _Contended:
    """A store whose Task another node moves just before each of this one's writes."""

    def __init__(self, store: PgStore, other: PgStore) -> None:
        self.store, self.other = store, other
        self.attempts = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.store, name)

    async def apply(self, change: TaskChange) -> StoredTask:
        self.attempts += 1
        now = await self.other.find_task(change.before.task.id)
        assert now is not None
        await self.other.apply(TaskChange(now, moved(now.task, WORKING, NOW + now.version), NOW))
        return await self.store.apply(change)


async def test_the_retries_are_bounded_and_the_last_conflict_is_raised(
    pg_cluster: Cluster,
) -> None:
    url = pg_cluster.fresh_store_url()
    async with open_pg_store(url) as one, open_pg_store(url) as two:
        created = stored_of(await one.accept(activation("m-1"), LOCATOR, NOW))
        contended = _Contended(one, two)
        store: TaskStore = contended  # type: ignore[assignment]
        owner = TaskOwner(created.task.id, store, clock)
        await owner.load()
        with pytest.raises(VersionConflict):
            await owner.mutate(lambda t: moved(t, COMPLETED, NOW + 99), None)
        assert contended.attempts == MAX_WRITE_ATTEMPTS
        stored = await one.find_task(created.task.id)
        assert stored is not None and stored.version == 1 + MAX_WRITE_ATTEMPTS  # only B's
        assert stored.task.status.state is WORKING


class _ConflictOnce:
    """A store whose first acceptance finds the Task's version moved (as a write by
    another node between the acceptance's read and its swap does): nothing recorded."""

    def __init__(self, store: PgStore) -> None:
        self.store = store
        self.accepts = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.store, name)

    async def accept(self, *args: Any, **kwargs: Any) -> Accepted:
        self.accepts += 1
        if self.accepts == 1:
            raise VersionConflict("moved")
        return await self.store.accept(*args, **kwargs)


async def test_a_continuation_that_conflicts_catches_up_and_is_accepted_once(
    pg_cluster: Cluster,
) -> None:
    url = pg_cluster.fresh_store_url()
    async with open_pg_store(url) as one, open_pg_store(url) as two:
        created = stored_of(await one.accept(activation("m-1"), LOCATOR, NOW))
        flaky = _ConflictOnce(one)
        store: TaskStore = flaky  # type: ignore[assignment]
        on_a = TaskOwner(created.task.id, store, clock)
        on_b = TaskOwner(created.task.id, two, clock)
        await on_a.load()
        await on_b.load()
        frames = await on_a.subscribe(None)
        await frames.receive()
        await on_b.mutate(lambda t: asking(t, NOW + 1), None)  # v2 through node B
        reply = activation("m-2", "blue", task_id=created.task.id)
        result = await on_a.accept(reply, LOCATOR)
        assert flaky.accepts == 2 and result.disposition == "continued"
        assert result.stored is not None and result.stored.version == 3
        assert on_a.stored == result.stored
        # what was published is buffered (the Task goes on: the stream stays open)
        states = [f.status_update.status.state for f in _buffered(frames) if f.status_update]
        assert states == [INPUT_REQUIRED, result.stored.task.status.state]  # B's first
        assert len([e for e in await one.journal() if e.kind == "CLAIM"]) == 2


def _buffered(rx: trio.MemoryReceiveChannel[StreamResponse]) -> list[StreamResponse]:
    out: list[StreamResponse] = []
    while True:
        try:
            out.append(rx.receive_nowait())
        except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
            return out
