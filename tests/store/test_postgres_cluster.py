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

from taskplane.errors import Fenced, StoreLocked, StoreUnavailable
from taskplane.http.page_tokens import PageTokens
from taskplane.store.postgres import leases
from taskplane.store.postgres.node import PgNode
from taskplane.store.postgres.nodes import PRESENCE_LOCK, PeerMismatch
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


def end_presence_sessions(url: str) -> None:
    """End the sessions holding a presence lock, as the server does when their
    process dies or when it restarts (waits up to 10 s for each backend to exit)."""
    ended = sql(
        url,
        "SELECT pg_terminate_backend(pid, 10000) FROM pg_locks WHERE locktype = 'advisory'"
        " AND classid = %s AND granted",
        PRESENCE_LOCK,
    )
    assert ended and all(done for (done,) in ended)


def presence_holders(url: str) -> int:
    return int(
        sql(
            url,
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s"
            " AND granted",
            PRESENCE_LOCK,
        )[0][0]  # type: ignore[call-overload]
    )


async def test_a_crashed_nodes_id_is_taken_over_one_heartbeat_after_its_session_is_gone(
    pg_cluster: Cluster,
) -> None:
    url = pg_cluster.fresh_store_url()
    crashed = await node(url, "web-1")
    try:
        # The process died: the server ended its sessions (the presence session
        # holding the id's lock); its row's heartbeat is still fresh.
        end_presence_sessions(url)
        waits: list[float] = []
        restarted = await node(url, "web-1", wait=waits.append)
        try:
            # it waited for the row's heartbeat to move (15 / 3 + 1 s); it did not
            assert waits == [6.0]
            rows = sql(url, "SELECT instance FROM nodes WHERE node_id = 'web-1'")
            assert rows == [(restarted.instance,)]
            with pytest.raises(StoreLocked):  # the restarted process holds the id now
                await node(url, "web-1")
            # were the first still running, its heartbeat stops it
            with pytest.raises(Fenced):
                await crashed.heartbeat()
        finally:
            await close(restarted)
    finally:
        await close(crashed)


async def test_a_start_whose_ids_lock_is_free_does_not_take_a_live_nodes_row(
    pg_cluster: Cluster,
) -> None:
    url = pg_cluster.fresh_store_url()
    live = await node(url, "web-1")
    try:
        # The live node's presence session was ended (a terminated session; a
        # database restart does the same to every node) while the node runs on.
        end_presence_sessions(url)

        def heartbeat_meanwhile(seconds: float) -> None:
            waits.append(seconds)
            trio.from_thread.run(live.heartbeat)  # the live node renews in the wait

        waits: list[float] = []
        with pytest.raises(StoreLocked, match="node id web-1 is in use by a live"):
            await node(url, "web-1", wait=heartbeat_meanwhile)
        assert waits == [6.0]
        # the live node kept its row, took its lock again and runs on
        assert sql(url, "SELECT instance FROM nodes") == [(live.instance,)]
        assert presence_holders(url) == 1
        await live.heartbeat()
    finally:
        await close(live)


async def test_a_heartbeat_on_a_new_session_takes_the_ids_lock_again(
    pg_cluster: Cluster,
) -> None:
    url = pg_cluster.fresh_store_url()
    live = await node(url, "web-1")
    try:
        end_presence_sessions(url)
        assert presence_holders(url) == 0
        await live.heartbeat()
        assert presence_holders(url) == 1
        # a start with its id now finds the lock held: refused without waiting
        with pytest.raises(StoreLocked):
            await node(url, "web-1")
    finally:
        await close(live)


async def test_a_heartbeat_that_finds_its_ids_lock_held_elsewhere_stops_the_node(
    pg_cluster: Cluster,
) -> None:
    url = pg_cluster.fresh_store_url()
    live = await node(url, "web-1")
    try:
        end_presence_sessions(url)
        with psycopg.connect(url, autocommit=True) as other:
            other.execute("SELECT pg_advisory_lock(%s, hashtext('web-1'))", (PRESENCE_LOCK,))
            with pytest.raises(Fenced, match="node id web-1 is held by another process"):
                await live.heartbeat()
    finally:
        await close(live)


async def test_after_a_database_restart_a_live_nodes_heartbeat_keeps_its_id(
    pg_cluster: Cluster,
) -> None:
    url = pg_cluster.fresh_store_url()
    live = await node(url, "web-1")
    try:
        with pg_cluster.stopped():
            pass
        for _ in range(3):  # the cluster sessions broken by the restart fail once each
            try:
                await live.heartbeat()
                break
            except StoreUnavailable:
                continue
        else:
            raise AssertionError("the heartbeat never succeeded after the restart")
        assert presence_holders(url) == 1
        with pytest.raises(StoreLocked):
            await node(url, "web-1")
        assert sql(url, "SELECT instance FROM nodes") == [(live.instance,)]
    finally:
        await close(live)


async def test_the_public_url_is_recorded_by_the_first_node_and_another_is_refused(
    pg_cluster: Cluster,
) -> None:
    url = pg_cluster.fresh_store_url()
    first = await node(url, "web-1")
    try:
        with pytest.raises(PeerMismatch) as refused:
            await node(url, "web-2", public_url="https://other.example")
        assert str(refused.value).startswith(
            f"A2A_PUBLIC_URL is https://other.example, but the live node web-1 of this "
            f"database advertises {PUBLIC_URL}"
        )
        assert sql(url, "SELECT node_id FROM nodes") == [("web-1",)]
        same = await node(url, "web-2")
        await close(same)
    finally:
        await close(first)
    assert sql(url, "SELECT value FROM meta WHERE key = 'public_url'") == [(PUBLIC_URL,)]


async def test_the_public_url_changes_when_no_node_is_live(
    pg_cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    url = pg_cluster.fresh_store_url()
    await close(await node(url, "web-1"))
    # a dead node's row (not deregistered, expired) does not hold the URL either
    dead = await node(url, "web-3")
    sql(url, "UPDATE nodes SET heartbeat_at = now() - interval '1 hour'")
    moved = await node(url, "web-2", public_url="https://new.example")
    try:
        changed = [r for r in caplog.records if getattr(r, "event", "") == "public_url_changed"]
        assert [(r.old, r.new) for r in changed] == [(PUBLIC_URL, "https://new.example")]  # type: ignore[attr-defined]
        assert sql(url, "SELECT value FROM meta WHERE key = 'public_url'") == [
            ("https://new.example",)
        ]
        with pytest.raises(PeerMismatch, match="the live node web-2 of this database advertises"):
            await node(url, "web-4")
    finally:
        await close(moved, dead)


async def test_a_lease_length_other_than_a_live_nodes_is_refused_naming_both(
    pg_cluster: Cluster,
) -> None:
    url = pg_cluster.fresh_store_url()
    first = await node(url, "web-1", ttl_s=15.0)
    try:
        with pytest.raises(PeerMismatch) as refused:
            await node(url, "web-2", ttl_s=20.0)
        assert str(refused.value).startswith(
            "TASKPLANE_LEASE_TTL_S is 20, but the live node web-1 of this database uses 15"
        )
    finally:
        await close(first)
    await close(await node(url, "web-2", ttl_s=20.0))  # free once none is live


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
