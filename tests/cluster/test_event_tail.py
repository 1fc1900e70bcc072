"""The event tail against the real PostgreSQL: it announces what the doorbell names,
reconnects its LISTEN session after the server ended it, and polls at once when it
is back (rings sent meanwhile are lost)."""

from __future__ import annotations

import threading

import psycopg
import pytest
import trio

from taskplane.cluster import events
from taskplane.cluster.events import EventTail
from taskplane.store.postgres.doorbell import Listener
from taskplane.store.postgres.events import PgChangeFeed
from taskplane.store.records import TaskChange
from tests.store.backends import open_pg_store
from tests.store.contract import LOCATOR, NOW, WORKING, activation, moved, stored_of
from tests.support.pg import Cluster


class Owners:
    """A registry with one live owner at ``version``; records announcements."""

    def __init__(self, task_id: str, version: int) -> None:
        self.task_id, self.version = task_id, version
        self.announced: list[tuple[str, int]] = []
        self.changed = trio.Event()

    def announce(self, task_id: str, version: int) -> bool:
        if task_id != self.task_id or version <= self.version:
            return False
        self.announced.append((task_id, version))
        self.version = version  # as the owner's catch-up would
        self.changed.set()
        self.changed = trio.Event()
        return True

    def watched(self) -> dict[str, int]:
        return {self.task_id: self.version}

    async def wait_version(self, version: int) -> None:
        with trio.fail_after(20):
            while self.version < version:
                await self.changed.wait()


def end_listeners(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE query LIKE 'LISTEN%%' AND pid != pg_backend_pid()"
        ).fetchone()
    return int(row[0]) if row else 0


async def test_the_tail_reconnects_and_polls_when_its_session_is_ended(
    pg_cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events, "POLL_S", 3600.0)  # polls only on (re)connection
    url = pg_cluster.fresh_store_url()
    back = threading.Event()  # the reconnection waits for it
    opened: list[Listener] = []

    def listen() -> Listener:
        if opened:
            back.wait(20)
        opened.append(Listener(url))
        return opened[-1]

    async with open_pg_store(url) as store:
        early = await trio.to_thread.run_sync(Listener, url)
        v1 = stored_of(await store.accept(activation("m-1"), LOCATOR, NOW))
        v2 = await store.apply(TaskChange(v1, moved(v1.task, WORKING, NOW), NOW))
        with trio.fail_after(20):  # v2's ring is gone before the tail listens
            heard: list[str] = []
            while not any(f"t:{v1.task.id}:2" in p for p in heard):
                await trio.lowlevel.wait_readable(early.fileno())
                heard += early.drain()
        early.close()
        owners = Owners(v1.task.id, 1)
        tail = EventTail(owners, PgChangeFeed(store._inbox), listen)
        async with trio.open_nursery() as nursery:
            await nursery.start(tail.run)
            await owners.wait_version(2)  # committed before the tail listened: the poll
            assert tail.announced_by_poll == 1
            v3 = await store.apply(TaskChange(v2, moved(v2.task, WORKING, NOW + 1), NOW))
            await owners.wait_version(3)
            assert tail.announced_by_poll == 1  # by the doorbell
            assert await trio.to_thread.run_sync(end_listeners, url) == 1
            await store.apply(TaskChange(v3, moved(v3.task, WORKING, NOW + 2), NOW))
            back.set()  # v4's ring went to nobody
            await owners.wait_version(4)
            assert tail.sessions_opened == 2 and tail.announced_by_poll == 2
            nursery.cancel_scope.cancel()
        assert [v for _, v in owners.announced] == [2, 3, 4]
