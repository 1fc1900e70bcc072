"""The PostgreSQL store of one node: its node lock, its sessions and their counters.

What the composition root opens when a store URL is configured, in this order: the
node lock (:mod:`taskplane.store.postgres.node_lock`: a second live node on the
database is refused), then the sessions, the first of which migrates the schema.
:meth:`PgNode.run_actor` is the store actor to supervise; :meth:`PgNode.close`
releases everything, the lock last.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from taskplane.mailbox import CrashHook, no_crash
from taskplane.store.postgres.actor import BatchCounters, run_store
from taskplane.store.postgres.database import DEFAULT_CONNECTIONS, open_connections
from taskplane.store.postgres.node_lock import NodeLock
from taskplane.store.postgres.sources import PgSourceStore
from taskplane.store.postgres.store import PgStore
from taskplane.store.requests import StoreRequest


class PgNode:
    """One node's open PostgreSQL store (blocking constructor: call it in a thread).

    Args:
        url: a libpq URL or conninfo string (passwords the libpq ways: a
            ``.pgpass`` file or ``PGPASSWORD``).
        connections: sessions the store actor commits on.
    Raises:
        StoreLocked: another live node holds the database.
        StoreVersionError: the database was written by a newer taskplane.
        StoreUnavailable: the server cannot be reached or the migration failed.
    """

    def __init__(self, url: str, *, connections: int = DEFAULT_CONNECTIONS) -> None:
        self.lock = NodeLock(url)
        try:
            self.sessions = open_connections(url, connections)
        except BaseException:
            self.lock.release()
            raise
        self.counters = BatchCounters()

    def task_store(self, inbox: trio.MemorySendChannel[StoreRequest]) -> PgStore:
        """The task store over the actor's ``inbox``."""
        return PgStore(inbox, self.counters)

    def source_store(self, inbox: trio.MemorySendChannel[StoreRequest]) -> PgSourceStore:
        """The source store over the same ``inbox``."""
        return PgSourceStore(inbox)

    async def run_actor(
        self,
        inbox: trio.MemoryReceiveChannel[StoreRequest],
        *,
        group_commit: bool = True,
        crash_hook: CrashHook = no_crash,
        on_batch: Callable[[int, float], None] | None = None,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """The store actor over this node's sessions (see
        :func:`~taskplane.store.postgres.actor.run_store` for the arguments)."""
        await run_store(
            self.sessions,
            inbox,
            self.counters,
            group_commit=group_commit,
            crash_hook=crash_hook,
            on_batch=on_batch,
            task_status=task_status,
        )

    def close(self) -> None:
        """Close the sessions, then release the node lock (idempotent; blocking)."""
        try:
            for session in self.sessions:
                session.close()
        finally:
            self.lock.release()
