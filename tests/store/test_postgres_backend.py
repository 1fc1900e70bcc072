"""What the PostgreSQL backend adds to the contract: versioned migrations under a
lock, driver errors translated at its edge, sessions that survive a server-side
disconnect, and one identity accepted once across sessions and stores."""

from __future__ import annotations

import os
import threading
from functools import partial
from typing import Any

import psycopg
import pytest
import trio
import trio.testing

from taskplane.errors import StoreLocked, StoreUnavailable, StoreVersionError, VersionConflict
from taskplane.store.postgres import actor as pg_actor
from taskplane.store.postgres.database import open_connections, redacted
from taskplane.store.postgres.schema import SCHEMA_VERSION, current_version
from taskplane.store.records import Accepted, JournalRecord, StoredTask, TaskChange
from taskplane.store.requests import StoreRequest, submit
from tests.store.backends import open_node, open_pg_store, open_pg_stores
from tests.store.contract import COMPLETED, LOCATOR, NOW, WORKING, activation, moved, stored_of
from tests.support.pg import Cluster


def version_of(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return current_version(conn)


async def test_nodes_starting_together_migrate_an_empty_database_once(
    pg_cluster: Cluster,
) -> None:
    url = pg_cluster.fresh_store_url()
    assert version_of(url) == 0
    opened: list[int] = []

    def open_one() -> None:
        sessions = open_connections(url, 2)
        opened.append(len(sessions))
        for session in sessions:
            session.close()

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(trio.to_thread.run_sync, open_one)
    assert opened == [2, 2, 2]
    assert version_of(url) == SCHEMA_VERSION
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM meta").fetchone()
    assert row == (1,)


async def test_a_database_written_by_a_newer_taskplane_is_refused(pg_cluster: Cluster) -> None:
    url = pg_cluster.fresh_store_url()
    async with open_pg_store(url) as store:
        await store.accept(activation("m-1"), LOCATOR, NOW)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE meta SET value = %s WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),)
        )
    with pytest.raises(StoreVersionError, match="upgrade taskplane"):
        await trio.to_thread.run_sync(open_connections, url, 1)


async def test_an_unreachable_server_is_store_unavailable_without_the_password(
    pg_cluster: Cluster,
) -> None:
    url = f"postgresql://postgres:s3cret@/none?host={pg_cluster.root}/nowhere&port=1"
    with pytest.raises(StoreUnavailable, match="cannot connect") as raised:
        await trio.to_thread.run_sync(open_connections, url, 1)
    assert "s3cret" not in str(raised.value)
    assert "s3cret" not in redacted(url) and "nowhere" in redacted(url)


async def test_sessions_closed_by_the_server_are_reopened_on_the_next_batch(
    pg_cluster: Cluster,
) -> None:
    url = pg_cluster.fresh_store_url()
    async with open_pg_store(url) as store:
        first = stored_of(await store.accept(activation("m-1"), LOCATOR, NOW))
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = 'taskplane' AND pid != pg_backend_pid()"
            )
        assert await store.find_task(first.task.id) == first
        again = await store.accept(activation("m-1"), LOCATOR, NOW)
        assert again.disposition == "duplicate"


@pytest.mark.parametrize("conversation", [None, "thread-1"], ids=["plain", "conversation"])
async def test_one_identity_sent_to_two_sessions_at_once_is_accepted_once(
    pg_cluster: Cluster, conversation: str | None
) -> None:
    """The claim decides across sessions, on the single-statement path (plain) and the
    general one: both acceptances wait on the identity's lock (held here by a third
    session), then one creates the Task and the other gets it back as a duplicate.
    (No overflow delay: the second session takes the second batch at once.)"""
    url = pg_cluster.fresh_store_url()
    act = activation("m-1", source="spool", conversation_key=conversation)
    async with open_pg_store(url, overflow_after_s=0.0) as store:
        with psycopg.connect(url, autocommit=True) as holder:
            holder.execute("BEGIN")
            holder.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (act.provider_key,)
            )
            results: list[Accepted] = []

            async def send() -> None:
                results.append(await store.accept(act, LOCATOR, NOW))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(send)
                await trio.testing.wait_all_tasks_blocked()  # the first batch is out
                nursery.start_soon(send)
                await trio.testing.wait_all_tasks_blocked()
                assert store.statistics().transactions == 2  # on two sessions
                holder.execute("ROLLBACK")
        assert sorted(r.disposition for r in results) == ["created", "duplicate"]
        assert results[0].task == results[1].task
        assert len(await store.journal()) == 2  # one CLAIM, one ACCEPTED


async def test_a_stale_write_from_another_store_on_the_database_is_refused(
    pg_cluster: Cluster,
) -> None:
    url = pg_cluster.fresh_store_url()
    async with open_pg_stores(url) as (one, _), open_pg_stores(url) as (two, _):
        stored = stored_of(await one.accept(activation("m-1"), LOCATOR, NOW))
        moved_once = await two.apply(TaskChange(stored, moved(stored.task, WORKING, NOW), NOW))
        assert moved_once.version == 2
        with pytest.raises(VersionConflict, match="written concurrently"):
            await one.apply(TaskChange(stored, moved(stored.task, WORKING, NOW), NOW))
        assert await one.find_task(stored.task.id) == moved_once


async def test_a_second_node_with_another_id_joins_the_database_and_one_with_the_same_id_is_refused(
    pg_cluster: Cluster,
) -> None:
    url = pg_cluster.fresh_store_url()
    first = await trio.to_thread.run_sync(partial(open_node, url, "node-a"))
    try:
        other = await trio.to_thread.run_sync(partial(open_node, url, "node-b"))
        await trio.to_thread.run_sync(other.close)
        with pytest.raises(StoreLocked, match="node id node-a is in use by a live") as refused:
            await trio.to_thread.run_sync(partial(open_node, url, "node-a"))
        assert f"pid {os.getpid()}" in str(refused.value)
    finally:
        await trio.to_thread.run_sync(first.close)
    again = await trio.to_thread.run_sync(partial(open_node, url, "node-a"))
    await trio.to_thread.run_sync(again.close)


async def test_plain_acceptances_sharing_a_batch_are_one_statement_with_duplicates_resolved(
    pg_cluster: Cluster,
) -> None:
    """New Tasks, an identity sent twice in the batch and one accepted before: each
    gets the answer it would get alone, in one transaction."""
    url = pg_cluster.fresh_store_url()
    async with open_pg_store(url) as store:
        earlier = await store.accept(activation("m-0"), LOCATOR, NOW)
        before = store.statistics().transactions
        sends = [activation("m-0"), activation("m-1"), activation("m-1"), activation("m-2")]
        results: dict[int, Accepted] = {}

        async def send(n: int) -> None:
            results[n] = await store.accept(sends[n], LOCATOR, NOW)

        async with trio.open_nursery() as nursery:
            for n in range(len(sends)):
                nursery.start_soon(send, n)
        assert store.statistics().transactions == before + 1
        assert results[0].disposition == "duplicate" and results[0].task == earlier.task
        assert sorted(results[n].disposition for n in (1, 2)) == ["created", "duplicate"]
        assert results[1].task == results[2].task
        assert results[3].disposition == "created"
        entries = await store.journal()
        assert sorted(e.kind for e in entries) == ["ACCEPTED"] * 3 + ["CLAIM"] * 3
        for accepted in (earlier, results[1], results[3]):  # each CLAIM before its ACCEPTED
            kinds = [e.kind for e in entries if e.activation_id == accepted.activation_id]
            assert kinds == ["CLAIM", "ACCEPTED"]


async def test_changes_sharing_a_batch_are_one_statement_and_a_stale_one_fails_alone(
    pg_cluster: Cluster,
) -> None:
    url = pg_cluster.fresh_store_url()
    async with open_pg_store(url) as store:
        first, second, third = [
            stored_of(await store.accept(activation(f"m-{n}"), LOCATOR, NOW)) for n in range(3)
        ]
        stale = third
        third = await store.apply(TaskChange(third, moved(third.task, WORKING, NOW), NOW))
        before = store.statistics().transactions
        outcomes: dict[str, object] = {}

        async def change(name: str, stored: StoredTask) -> None:
            record = JournalRecord("WOKEN", "activation-" + name, stored.task.id, {"n": name})
            try:
                outcomes[name] = await store.apply(
                    TaskChange(stored, moved(stored.task, COMPLETED, NOW + 1), NOW + 1, (record,))
                )
            except VersionConflict as exc:
                outcomes[name] = exc

        async with trio.open_nursery() as nursery:
            for name, stored in (("one", first), ("two", second), ("stale", stale)):
                nursery.start_soon(change, name, stored)
        assert store.statistics().transactions == before + 1
        assert isinstance(outcomes["stale"], VersionConflict)
        for name, stored in (("one", first), ("two", second)):
            assert outcomes[name] == await store.find_task(stored.task.id)
            assert [e.fields.get("n") for e in await store.journal(task_id=stored.task.id)] == [
                None,
                None,
                name,
            ]
        assert await store.find_task(third.task.id) == third
        assert len(await store.journal(task_id=third.task.id)) == 2  # CLAIM, ACCEPTED


async def test_a_server_crash_is_store_unavailable_until_it_is_back(pg_cluster: Cluster) -> None:
    """Driver errors reach callers as the contract's errors, and the store recovers
    by itself: what was committed before the crash is there after it."""
    url = pg_cluster.fresh_store_url()
    async with open_pg_store(url) as store:
        first = stored_of(await store.accept(activation("m-1"), LOCATOR, NOW))
        with pg_cluster.stopped():
            with pytest.raises(StoreUnavailable):
                await store.accept(activation("m-2"), LOCATOR, NOW)
            with pytest.raises(StoreUnavailable):
                await store.find_task(first.task.id)
        assert await store.find_task(first.task.id) == first
        assert (await store.accept(activation("m-2"), LOCATOR, NOW)).disposition == "created"
        assert (await store.accept(activation("m-1"), LOCATOR, NOW)).disposition == "duplicate"


async def test_a_batch_held_up_on_the_primary_holds_up_the_next_only_for_the_overflow_delay(
    pg_cluster: Cluster,
) -> None:
    """Design rule "A batch waits for the busy session": batches one after the other
    share the primary session; while the primary is held up by a slow op (here one
    waiting in its worker thread until released), the next batch commits on the
    second session once the overflow delay has passed, before the slow op ends."""
    url = pg_cluster.fresh_store_url()
    sessions = await trio.to_thread.run_sync(open_connections, url, 2)
    tx, rx = trio.open_memory_channel[StoreRequest](8)
    release = threading.Event()

    def backend_pid(conn: psycopg.Connection[Any]) -> int:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        return int(row[0])

    def slow(conn: psycopg.Connection[Any]) -> int:
        release.wait(60)
        return backend_pid(conn)

    pids: dict[str, int] = {}
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(pg_actor.run_store, sessions, rx, pg_actor.BatchCounters()))
            first, second = await submit(tx, backend_pid), await submit(tx, backend_pid)
            assert first == second  # the primary took both

            async def held_up() -> None:
                pids["slow"] = await submit(tx, slow)

            async with trio.open_nursery() as slow_one:
                slow_one.start_soon(held_up)
                await trio.testing.wait_all_tasks_blocked()  # its batch is out
                pids["next"] = await submit(tx, backend_pid)
                assert "slow" not in pids  # still held up when the next one committed
                release.set()
            nursery.cancel_scope.cancel()
    finally:
        release.set()
        tx.close()
        for session in sessions:
            await trio.to_thread.run_sync(session.close)
    assert pids["slow"] == first
    assert pids["next"] != first
