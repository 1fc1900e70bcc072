"""Change records, the doorbell and the claims watermark on the real PostgreSQL.

Every committed version of a Task is a row written in the transaction of the write;
the doorbell is rung after the COMMIT, once per batch, naming the versions in commit
order; claims are read by transaction watermark, so one committed out of order is
read on the next round, never skipped (design rules "Streaming shows what happens
after you connect" and "Idempotent intake")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
import trio

from taskplane.cluster.doorbell import parse
from taskplane.store.postgres.doorbell import Listener
from taskplane.store.postgres.events import PgChangeFeed, claim_cursor, claims_after
from taskplane.store.postgres.store import PgStore
from taskplane.store.records import StoredTask, TaskChange
from tests.store.backends import open_pg_store
from tests.store.contract import (
    COMPLETED,
    INPUT_REQUIRED,
    LOCATOR,
    NOW,
    WORKING,
    activation,
    moved,
    stored_of,
)
from tests.support.pg import Cluster


@asynccontextmanager
async def listening(url: str) -> AsyncIterator[Listener]:
    listener = await trio.to_thread.run_sync(Listener, url)
    try:
        yield listener
    finally:
        listener.close()


async def heard_until(listener: Listener, done: object) -> list[str]:
    """Payloads heard until one contains ``done`` (bounded by a deadline)."""
    payloads: list[str] = []
    with trio.fail_after(10):
        while not any(str(done) in p for p in payloads):
            await trio.lowlevel.wait_readable(listener.fileno())
            payloads += listener.drain()
    return payloads


def feed_of(store: PgStore) -> PgChangeFeed:
    return PgChangeFeed(store._inbox)  # the same store actor


async def test_every_version_is_recorded_with_its_write_and_a_refused_one_is_not(
    pg_cluster: Cluster,
) -> None:
    url = pg_cluster.fresh_store_url()
    async with open_pg_store(url) as store:
        v1 = stored_of(await store.accept(activation("m-1"), LOCATOR, NOW))
        v2 = await store.apply(TaskChange(v1, moved(v1.task, WORKING, NOW + 1), NOW + 1))
        v3 = await store.apply(TaskChange(v2, moved(v2.task, COMPLETED, NOW + 2), NOW + 2))
        try:
            await store.apply(TaskChange(v1, moved(v1.task, COMPLETED, NOW + 3), NOW + 3))
        except Exception:
            pass  # a stale change: refused, so no record either
        feed = feed_of(store)
        assert await feed.versions_after(v1.task.id, 0) == (v1, v2, v3)
        assert await feed.versions_after(v1.task.id, 1) == (v2, v3)
        assert await feed.versions_after(v1.task.id, 3) == ()
        assert await feed.current_versions([v1.task.id, "gone"]) == {v1.task.id: 3}
        with psycopg.connect(url) as conn:
            rows = conn.execute(
                "SELECT version FROM task_events WHERE task_id = %s ORDER BY version",
                (v1.task.id,),
            ).fetchall()
        assert rows == [(1,), (2,), (3,)]


async def test_a_pruned_version_is_skipped_and_the_newest_is_the_stored_task(
    pg_cluster: Cluster,
) -> None:
    url = pg_cluster.fresh_store_url()
    async with open_pg_store(url) as store:
        v1 = stored_of(await store.accept(activation("m-1"), LOCATOR, NOW))
        v2 = await store.apply(TaskChange(v1, moved(v1.task, WORKING, NOW + 1), NOW + 1))
        v3 = await store.apply(TaskChange(v2, moved(v2.task, COMPLETED, NOW + 2), NOW + 2))
        with psycopg.connect(url) as conn:
            conn.execute("DELETE FROM task_events WHERE version = 2")
        assert await feed_of(store).versions_after(v1.task.id, 1) == (v3,)


async def test_the_doorbell_rings_each_change_up_to_the_newest_version(
    pg_cluster: Cluster,
) -> None:
    """Every change is rung after its commit; rings of changes committed within one
    gathering window are one ring naming the Task's newest version (a ring only says
    "catch up to at least this version", and what a node shows is read in version
    order, from the change records)."""
    url = pg_cluster.fresh_store_url()
    async with open_pg_store(url) as store, listening(url) as listener:
        stored: StoredTask = stored_of(await store.accept(activation("m-1"), LOCATOR, NOW))
        for n in range(1, 6):
            state = WORKING if n % 2 else INPUT_REQUIRED
            stored = await store.apply(
                TaskChange(stored, moved(stored.task, state, NOW + n), NOW + n)
            )
        rung: list[int] = []
        payloads: list[str] = []
        with trio.fail_after(10):
            while 6 not in rung:
                await trio.lowlevel.wait_readable(listener.fileno())
                found = listener.drain()
                payloads += found
                rung += [
                    int(t.rsplit(":", 1)[1]) for p in found for t in p.split() if t.startswith("t:")
                ]
        assert parse(payloads).claims and parse(payloads).wake  # the acceptance's
        assert parse(payloads).versions == {stored.task.id: 6}
        assert rung == sorted(set(rung))  # one ringer: rung in commit order, each once


async def test_a_node_hears_its_own_versions_but_not_its_own_claims_and_wakes(
    pg_cluster: Cluster,
) -> None:
    # Each payload opens with its node's name: node-a's own claims and wakes tell it
    # nothing new (its index and its claimer had them first); node-b hears both. An
    # unnamed payload (an operator command's store) is everyone's.
    url = pg_cluster.fresh_store_url()
    async with open_pg_store(url, "node-a") as store, listening(url) as listener:
        created = stored_of(await store.accept(activation("m-0"), LOCATOR, NOW))
        payloads = await heard_until(listener, f"t:{created.task.id}:1")
    assert all(p.startswith("n:node-a ") for p in payloads)
    own, other = parse(payloads, "node-a"), parse(payloads, "node-b")
    assert (own.claims, own.wake) == (False, False)
    assert (other.claims, other.wake) == (True, True)
    assert own.versions == other.versions == {created.task.id: 1}
    unnamed = parse([p.removeprefix("n:node-a ") for p in payloads], "node-a")
    assert (unnamed.claims, unnamed.wake) == (True, True)
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT accepted_by FROM wakes").fetchone()
    assert row == ("node-a",)  # design rule "A wake waits for its node"


async def test_a_ring_is_heard_only_once_its_commit_is_visible(pg_cluster: Cluster) -> None:
    url = pg_cluster.fresh_store_url()
    async with open_pg_store(url) as store, listening(url) as listener:
        created = stored_of(await store.accept(activation("m-0"), LOCATOR, NOW))
        await heard_until(listener, f"t:{created.task.id}:1")
        async with trio.open_nursery() as nursery:
            for n in range(1, 21):
                nursery.start_soon(store.accept, activation(f"m-{n}"), LOCATOR, NOW)
            heard: set[str] = set()
            with trio.fail_after(10), psycopg.connect(url, autocommit=True) as conn:
                while len(heard) < 20:
                    await trio.lowlevel.wait_readable(listener.fileno())
                    for ring in parse(listener.drain()).versions:
                        row = conn.execute("SELECT 1 FROM tasks WHERE task_id = %s", (ring,))
                        assert row.fetchone() == (1,), "a ring before its commit"
                        heard.add(ring)


async def test_claims_committed_out_of_order_are_all_read(pg_cluster: Cluster) -> None:
    url = pg_cluster.fresh_store_url()
    async with open_pg_store(url):
        pass  # migrated
    insert = (
        "INSERT INTO journal (kind, activation_id, provider_key, record_json, recorded_at_ms)"
        " VALUES ('CLAIM', %s, %s, '{}', 0)"
    )
    with (
        psycopg.connect(url, autocommit=True) as tail,
        psycopg.connect(url) as early,
        psycopg.connect(url) as late,
    ):
        cursor = claim_cursor(tail)
        early.execute("SELECT pg_current_xact_id()")  # starts first: the lower xid
        early.execute(insert, ("a-early", "k-early"))  # and the lower seq
        late.execute(insert, ("a-late", "k-late"))
        late.commit()
        cursor, keys = claims_after(tail, cursor)
        assert keys == ["k-late"]  # k-early is not committed yet
        early.commit()  # commits after a later claim was read
        cursor, keys = claims_after(tail, cursor)
        assert keys == ["k-early"]  # not skipped
        cursor, keys = claims_after(tail, cursor)
        assert keys == []  # and read once
