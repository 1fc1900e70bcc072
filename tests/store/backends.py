"""Backend factories for the store contract suite: each opens a running store.

A factory is an async context manager yielding a :class:`TaskStore` whose actor runs
for the duration of the block; leaving it stops the actor and closes the backend.
A new backend adds its factory here and a ``test_contract_<backend>.py`` module.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Literal

import trio

from taskplane.store.postgres import actor as pg_actor
from taskplane.store.postgres.database import DEFAULT_CONNECTIONS, open_connections
from taskplane.store.postgres.node import PgNode
from taskplane.store.postgres.sources import PgSourceStore
from taskplane.store.postgres.store import PgStore
from taskplane.store.sqlite.actor import STORE_INBOX_SIZE, StoreRequest, run_store
from taskplane.store.sqlite.database import Database
from taskplane.store.sqlite.sources import SqliteSourceStore
from taskplane.store.sqlite.store import SqliteStore


@asynccontextmanager
async def open_sqlite_stores(
    root: Path | Literal[":memory:"], *, in_thread: bool = True
) -> AsyncIterator[tuple[SqliteStore, SqliteSourceStore]]:
    """The SQLite task store and source store over ``root``, sharing one actor."""
    db = await trio.to_thread.run_sync(partial(Database, root))
    tx, rx = trio.open_memory_channel[StoreRequest](STORE_INBOX_SIZE)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(run_store, db, rx, in_thread=in_thread))
            try:
                yield SqliteStore(tx, db), SqliteSourceStore(tx)
            finally:
                nursery.cancel_scope.cancel()
    finally:
        tx.close()
        db.close()


@asynccontextmanager
async def open_sqlite_store(
    root: Path | Literal[":memory:"], *, in_thread: bool = True
) -> AsyncIterator[SqliteStore]:
    """The SQLite backend over ``root`` (a store root directory, or ``":memory:"``)."""
    db = await trio.to_thread.run_sync(partial(Database, root))
    tx, rx = trio.open_memory_channel[StoreRequest](STORE_INBOX_SIZE)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(run_store, db, rx, in_thread=in_thread))
            try:
                yield SqliteStore(tx, db)
            finally:
                nursery.cancel_scope.cancel()
    finally:
        tx.close()
        db.close()


@asynccontextmanager
async def open_pg_stores(
    url: str,
    *,
    connections: int = DEFAULT_CONNECTIONS,
    node_id: str | None = None,
    overflow_after_s: float = pg_actor.OVERFLOW_AFTER_S,
) -> AsyncIterator[tuple[PgStore, PgSourceStore]]:
    """The PostgreSQL task store and source store over the database ``url``, sharing
    one store actor over ``connections`` sessions (the second taking a batch once the
    first has held one for ``overflow_after_s``), as node ``node_id`` (``None``: no
    node's)."""
    sessions = await trio.to_thread.run_sync(open_connections, url, connections)
    counters = pg_actor.BatchCounters()
    tx, rx = trio.open_memory_channel[StoreRequest](STORE_INBOX_SIZE)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(
                partial(
                    pg_actor.run_store,
                    sessions,
                    rx,
                    counters,
                    node_id=node_id,
                    overflow_after_s=overflow_after_s,
                )
            )
            try:
                yield PgStore(tx, counters, node_id), PgSourceStore(tx)
            finally:
                nursery.cancel_scope.cancel()
    finally:
        tx.close()
        for session in sessions:
            await trio.to_thread.run_sync(session.close)


@asynccontextmanager
async def open_pg_store(
    url: str, node_id: str | None = None, *, overflow_after_s: float = pg_actor.OVERFLOW_AFTER_S
) -> AsyncIterator[PgStore]:
    """The PostgreSQL backend over the database ``url`` (as node ``node_id``; see
    :func:`open_pg_stores` for ``overflow_after_s``)."""
    async with open_pg_stores(url, node_id=node_id, overflow_after_s=overflow_after_s) as (
        store,
        _,
    ):
        yield store


PUBLIC_URL = "https://agents.example"
"""The public URL the test nodes of one database advertise."""


def open_node(
    url: str,
    node_id: str,
    *,
    ttl_s: float = 15.0,
    public_url: str = PUBLIC_URL,
    wait: Callable[[float], None] | None = None,
) -> PgNode:
    """A registered node on the database at ``url`` (blocking: call in a thread);
    ``wait`` replaces the start's wait for a young row's heartbeat to move (by
    default a start that would wait fails the test)."""

    def unexpected_wait(seconds: float) -> None:
        raise AssertionError(f"the start waited {seconds} s")

    return PgNode(
        url,
        node_id=node_id,
        lease_ttl_s=ttl_s,
        public_url=public_url,
        connections=1,
        wait=unexpected_wait if wait is None else wait,
    )
