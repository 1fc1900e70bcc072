"""Cluster membership on the real PostgreSQL: the node registry, the public URL every
node shares, leader leases on database time, a source checkpoint fenced by its lease,
and the page-token key every node shares.

Expiry is database time: a test that needs a row or a lease to have expired moves its
time back on the server (``heartbeat_at``, ``expires_at``) instead of sleeping; the
comparison with ``now()`` is the database's, as in production.
"""

from __future__ import annotations

from functools import partial

import psycopg
import pytest
import trio

from taskplane.errors import Fenced, StoreLocked
from taskplane.http.page_tokens import PageTokens
from taskplane.store.postgres import leases
from taskplane.store.postgres.node import PgNode
from taskplane.store.postgres.nodes import PRESENCE_LOCK, PublicUrlMismatch
from taskplane.store.records import TaskQuery
from taskplane.store.source_store import LeaseFence
from tests.store.backends import PUBLIC_URL, open_node, open_pg_stores
from tests.store.contract import ALICE, LOCATOR, NOW, activation
from tests.support.pg import Cluster


def sql(url: str, statement: str, *args: object) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(statement, args)
        return cursor.fetchall() if cursor.description else []


async def node(url: str, node_id: str, **kw: object) -> PgNode:
    return await trio.to_thread.run_sync(partial(open_node, url, node_id, **kw))  # type: ignore[arg-type]


async def close(*nodes: PgNode) -> None:
    for opened in nodes:
        await trio.to_thread.run_sync(opened.close)


# ---- the node registry ------------------------------------------------------------


async def test_a_live_duplicate_node_id_is_refused_naming_it_and_where_it_runs(
    pg_cluster: Cluster,
) -> None:
    url = pg_cluster.fresh_store_url()
    first = await node(url, "web-1")
    try:
        await first.heartbeat()  # a live node renews on database time
        with pytest.raises(StoreLocked) as refused:
            await node(url, "web-1")
        message = str(refused.value)
        assert "node id web-1 is in use by a live taskplane node" in message
        assert f"pid {first_pid(url, 'web-1')}" in message and "last heartbeat" in message
        # the refused start left the live node's row as it was
        assert sql(url, "SELECT count(*), min(instance) FROM nodes") == [(1, first.instance)]
    finally:
        await close(first)
    assert sql(url, "SELECT count(*) FROM nodes") == [(0,)]  # a clean stop deregisters


def first_pid(url: str, node_id: str) -> object:
    return sql(url, "SELECT pid FROM nodes WHERE node_id = %s", node_id)[0][0]


async def test_an_expired_node_row_is_taken_over_and_the_old_process_is_fenced(
    pg_cluster: Cluster,
) -> None:
    url = pg_cluster.fresh_store_url()
    stalled = await node(url, "web-1", ttl_s=2.0)
    try:
        # The process stalled: its heartbeat is older than its lease length.
        sql(url, "UPDATE nodes SET heartbeat_at = now() - interval '3 seconds'")
        successor = await node(url, "web-1", ttl_s=2.0)
        try:
            rows = sql(url, "SELECT instance FROM nodes WHERE node_id = 'web-1'")
            assert rows == [(successor.instance,)]
            with pytest.raises(Fenced, match="taken over"):
                await stalled.heartbeat()
            await successor.heartbeat()
        finally:
            await close(successor)
    finally:
        await close(stalled)


async def test_a_crashed_nodes_id_is_taken_over_at_once_once_its_session_is_gone(
    pg_cluster: Cluster,
) -> None:
    url = pg_cluster.fresh_store_url()
    crashed = await node(url, "web-1")
    try:
        # The process died: the server ends its sessions (here: the presence session
        # holding the id's lock); its row's heartbeat is still fresh.
        ended = sql(  # waits (up to 10 s) until the backend has exited
            url,
            "SELECT pg_terminate_backend(pid, 10000) FROM pg_locks WHERE locktype = 'advisory'"
            " AND classid = %s AND granted",
            PRESENCE_LOCK,
        )
        assert ended == [(True,)]
        restarted = await node(url, "web-1")
        try:
            rows = sql(url, "SELECT instance FROM nodes WHERE node_id = 'web-1'")
            assert rows == [(restarted.instance,)]
            with pytest.raises(StoreLocked):  # the restarted process holds the id now
                await node(url, "web-1")
        finally:
            await close(restarted)
    finally:
        await close(crashed)


async def test_the_public_url_is_recorded_by_the_first_node_and_another_is_refused(
    pg_cluster: Cluster,
) -> None:
    url = pg_cluster.fresh_store_url()
    first = await node(url, "web-1")
    try:
        with pytest.raises(PublicUrlMismatch) as refused:
            await node(url, "web-2", public_url="https://other.example")
        assert str(refused.value).startswith(
            f"A2A_PUBLIC_URL is https://other.example, but the nodes of this database "
            f"advertise {PUBLIC_URL}"
        )
        assert sql(url, "SELECT node_id FROM nodes") == [("web-1",)]
        same = await node(url, "web-2")
        await close(same)
    finally:
        await close(first)
    assert sql(url, "SELECT value FROM meta WHERE key = 'public_url'") == [(PUBLIC_URL,)]


# ---- leader leases ----------------------------------------------------------------


async def test_two_contenders_for_a_lease_get_one_leader_and_it_moves_after_expiry(
    pg_cluster: Cluster,
) -> None:
    url = pg_cluster.fresh_store_url()
    a, b = await node(url, "node-a"), await node(url, "node-b")
    try:
        won: dict[str, int | None] = {}

        async def contend(contender: PgNode) -> None:
            won[contender.node_id] = await contender.acquire("source:relay", 15.0)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(contend, a)
            nursery.start_soon(contend, b)
        assert sorted(won.values(), key=str) == [1, None]
        leader, follower = (a, b) if won["node-a"] == 1 else (b, a)
        assert await leader.renew("source:relay", 1, 15.0)
        assert not await follower.renew("source:relay", 1, 15.0)  # not its lease
        assert await follower.acquire("source:relay", 15.0) is None  # live: no takeover

        sql(url, "UPDATE leases SET expires_at = now() - interval '1 second'")
        assert not await leader.renew("source:relay", 1, 15.0)  # expired: not renewed
        assert await follower.acquire("source:relay", 15.0) == 2  # moved, epoch + 1
        assert sql(url, "SELECT node_id, epoch FROM leases") == [(follower.node_id, 2)]
        assert not await leader.renew("source:relay", 1, 15.0)
        await leader.release("source:relay", 1)  # a stale release changes nothing
        assert await leader.acquire("source:relay", 15.0) is None

        await follower.release("source:relay", 2)  # released: free at once
        assert await leader.acquire("source:relay", 15.0) == 3
    finally:
        await close(a, b)


async def test_a_deposed_sources_checkpoint_write_is_fenced_and_changes_nothing(
    pg_cluster: Cluster,
) -> None:
    url = pg_cluster.fresh_store_url()
    a, b = await node(url, "node-a"), await node(url, "node-b")
    try:
        async with open_pg_stores(url) as (_, sources):
            first = await a.acquire("source:relay", 15.0)
            assert first == 1
            held = LeaseFence("source:relay", "node-a", first)
            await sources.save_checkpoint("p", "relay", {"cursor": 1}, fence=held)

            sql(url, "UPDATE leases SET expires_at = now() - interval '1 second'")
            with pytest.raises(Fenced, match="no longer node node-a's"):  # expired
                await sources.save_checkpoint("p", "relay", {"cursor": 2}, fence=held)
            taken = await b.acquire("source:relay", 15.0)
            assert taken == 2
            with pytest.raises(Fenced):  # moved to node-b
                await sources.save_checkpoint("p", "relay", {"cursor": 3}, fence=held)
            assert await sources.load_checkpoint("p", "relay") == {"cursor": 1}

            current = LeaseFence("source:relay", "node-b", taken)
            await sources.save_checkpoint("p", "relay", {"cursor": 4}, fence=current)
            assert await sources.load_checkpoint("p", "relay") == {"cursor": 4}
    finally:
        await close(a, b)


async def test_a_takeover_waits_for_a_fenced_write_in_flight_then_refuses_the_next(
    pg_cluster: Cluster,
) -> None:
    url = pg_cluster.fresh_store_url()
    a, b = await node(url, "node-a"), await node(url, "node-b")
    try:
        assert await a.acquire("deliverer", 15.0) == 1
        fence = LeaseFence("deliverer", "node-a", 1)
        with psycopg.connect(url, autocommit=True) as writer:
            with writer.transaction():
                leases.check_fence(writer, fence)  # the write's transaction is open
                with psycopg.connect(url, autocommit=True) as other:
                    other.execute("SET lock_timeout = '200ms'")
                    with pytest.raises(psycopg.errors.LockNotAvailable):
                        leases.acquire(other, "deliverer", "node-b", 15.0)  # it waits
            sql(url, "UPDATE leases SET expires_at = now() - interval '1 second'")
            assert await b.acquire("deliverer", 15.0) == 2  # once the write committed
            with writer.transaction(), pytest.raises(Fenced):
                leases.check_fence(writer, fence)
    finally:
        await close(a, b)


# ---- the shared page-token key ----------------------------------------------------


async def test_page_two_is_opened_by_another_node_of_the_database(pg_cluster: Cluster) -> None:
    url = pg_cluster.fresh_store_url()
    a, b = await node(url, "node-a"), await node(url, "node-b")
    try:
        assert a.page_key == b.page_key and len(a.page_key) == 32
        bound = (ALICE.tenant, ALICE.principal, None, None, None)
        async with open_pg_stores(url) as (one, _), open_pg_stores(url) as (two, _):
            for n in range(3):
                await one.accept(activation(f"m-{n}"), LOCATOR, NOW + n)
            first = await one.list_tasks(TaskQuery(ALICE, page_size=2))
            token = PageTokens(a.page_key).seal(first.next_page_token, bound)
            cursor = PageTokens(b.page_key).open(token, bound)
            second = await two.list_tasks(TaskQuery(ALICE, page_size=2, page_token=cursor))
        listed = [t.id for t in (*first.tasks, *second.tasks)]
        assert len(first.tasks) == 2 and len(second.tasks) == 1
        assert len(set(listed)) == 3 and second.next_page_token == ""
    finally:
        await close(a, b)
    restarted = await node(url, "node-c")
    assert restarted.page_key == a.page_key  # created once, kept across restarts
    await close(restarted)
