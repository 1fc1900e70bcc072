"""The PostgreSQL store of one node: its sessions, its place in the node registry,
its cluster session and what every node of the database shares.

What the composition root opens when a store URL is configured, in this order: the
sessions (the first migrates the schema), then the node's registration
(:mod:`taskplane.store.postgres.nodes`: the public URL checked, a live node with
the same id refused), then the shared page-token key. :meth:`PgNode.run_actor` is
the store actor to supervise; the heartbeat and the leader leases
(:mod:`taskplane.store.postgres.leases`) run on a cluster session of their own
(:class:`ClusterSession`), so they never wait behind a batch of task writes.
:meth:`PgNode.close` deregisters the node and closes everything.
"""

from __future__ import annotations

import datetime
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import TypeVar

import psycopg
import trio

from taskplane.errors import Fenced
from taskplane.mailbox import CrashHook, no_crash
from taskplane.store.postgres import leases, nodes
from taskplane.store.postgres.actor import BatchCounters, run_store
from taskplane.store.postgres.database import (
    DEFAULT_CONNECTIONS,
    connect,
    open_connections,
    translate,
)
from taskplane.store.postgres.schema import Connection
from taskplane.store.postgres.sources import PgSourceStore
from taskplane.store.postgres.store import PgStore
from taskplane.store.requests import StoreRequest

T = TypeVar("T")

PAGE_KEY_BYTES = 32
"""Bytes of the page-token key every node of a database shares."""
IDLE_CLUSTER_SESSIONS = 2
"""Cluster sessions kept open between calls (more are opened while calls overlap)."""
CLUSTER_THREADS = 8
"""Worker threads the cluster calls may occupy at once, abandoned ones included (a
server that stopped answering holds each for up to its connect or keepalive timeout),
apart from the threads the store actor's batches use."""


class ClusterSession:
    """Sessions of the node's own for heartbeats and leases (blocking calls run in
    worker threads).

    Each call takes an idle session, or opens one, and runs its op in one
    transaction. A call may be abandoned by its caller (a leader whose deadline
    passed does not wait for a server that stopped answering): its thread finishes
    on its own and gives the session back only if the op completed.
    """

    def __init__(self, url: str, first: Connection | None = None) -> None:
        self._url = url
        self._guard = threading.Lock()
        self._idle: list[Connection] = [first] if first is not None else []
        self._closed = False
        self.threads = trio.CapacityLimiter(CLUSTER_THREADS)
        """The limiter of the worker threads the cluster calls occupy."""

    def call(self, op: Callable[[Connection], T]) -> T:
        """Run ``op`` in one transaction (blocking).

        Raises:
            StoreUnavailable: the server cannot be reached or the transaction failed.
            TaskplaneError: what ``op`` raised (its transaction rolled back).
        """
        with self._guard:
            conn = self._idle.pop() if self._idle else None
        conn = conn if conn is not None and not conn.closed else connect(self._url)
        try:
            with conn.transaction():
                result = op(conn)
        except psycopg.Error as exc:
            conn.close()
            raise translate(exc, "write") from exc
        except BaseException:
            if conn.broken:
                conn.close()
            else:
                self._give(conn)
            raise
        self._give(conn)
        return result

    async def run(self, op: Callable[[Connection], T]) -> T:
        """:meth:`call` in a worker thread; cancelling the caller abandons the thread."""
        return await trio.to_thread.run_sync(
            partial(self.call, op), abandon_on_cancel=True, limiter=self.threads
        )

    def _give(self, conn: Connection) -> None:
        with self._guard:
            if not self._closed and len(self._idle) < IDLE_CLUSTER_SESSIONS:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Close the idle sessions (a call still running closes its own)."""
        with self._guard:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def shared_page_key(conn: Connection) -> bytes:
    """The database's page-token key: created once by the first node to ask
    (``INSERT ... ON CONFLICT DO NOTHING``), then read, so every node signs and opens
    the same ``GET /tasks`` page tokens."""
    conn.execute(
        "INSERT INTO meta (key, value) VALUES ('page_token_key', %s) ON CONFLICT (key) DO NOTHING",
        (secrets.token_hex(PAGE_KEY_BYTES),),
    )
    row = conn.execute("SELECT value FROM meta WHERE key = 'page_token_key'").fetchone()
    assert row is not None
    return bytes.fromhex(str(row[0]))


class PgNode:
    """One node's open PostgreSQL store (blocking constructor: call it in a thread).

    Args:
        url: a libpq URL or conninfo string (passwords the libpq ways: a
            ``.pgpass`` file or ``PGPASSWORD``).
        node_id: this node's id (``TASKPLANE_NODE_ID``).
        lease_ttl_s: this node's lease length, seconds (``TASKPLANE_LEASE_TTL_S``).
        public_url: ``A2A_PUBLIC_URL``, the same on every node of the database.
        connections: sessions the store actor commits on.
        wait: blocks for the given seconds (a start whose id's lock is free but whose
            row is young waits :func:`nodes.renewal_wait_s` for the row to move).
    Attributes:
        page_key: the page-token key every node of the database shares.
    Raises:
        StoreLocked: a live node with ``node_id`` runs on the database.
        PeerMismatch: a live node of the database advertises another public URL or
            uses another lease length.
        StoreVersionError: the database was written by a newer taskplane.
        StoreUnavailable: the server cannot be reached or the migration failed.
    """

    def __init__(
        self,
        url: str,
        *,
        node_id: str,
        lease_ttl_s: float,
        public_url: str,
        connections: int = DEFAULT_CONNECTIONS,
        wait: Callable[[float], None] = time.sleep,
    ) -> None:
        self.node_id = node_id
        self._url = url
        self.lease_ttl_s = lease_ttl_s
        self.instance = secrets.token_hex(8)
        self.sessions = open_connections(url, connections)
        self.cluster = ClusterSession(url)
        self._presence: Connection | None = None
        self._presence_guard = threading.Lock()
        record = nodes.NodeRecord(
            node_id, self.instance, public_url, socket.gethostname(), os.getpid(), lease_ttl_s
        )

        try:
            self._presence = connect(url)
            present, seen = self._claim_presence(wait)

            def start(conn: Connection) -> bytes:
                nodes.check_peers(conn, record)
                nodes.register(conn, record, present=present, seen=seen)
                return shared_page_key(conn)

            self.page_key = self.cluster.call(start)
        except BaseException:
            self._close_cluster()
            self._close_sessions()
            raise
        self.counters = BatchCounters()

    def _claim_presence(
        self, wait: Callable[[float], None]
    ) -> tuple[bool, datetime.datetime | None]:
        """Take the id's presence lock for a start: ``(present, seen)`` for
        :func:`nodes.register`. A free lock over a young row (the database restarted,
        or the holder's session was ended, while its process may still run) is given
        back for :func:`nodes.renewal_wait_s`, then taken again: the row may then be
        taken over only if its heartbeat is still ``seen``."""
        assert self._presence is not None
        try:
            present = nodes.take_presence(self._presence, self.node_id)
            if not present:
                return False, None
            found = self.cluster.call(partial(nodes.probe, node_id=self.node_id))
            if found is None or not found.young:
                return True, None if found is None else found.heartbeat_at
            nodes.release_presence(self._presence, self.node_id)
            wait(nodes.renewal_wait_s(found.lease_ttl_s))
            return nodes.take_presence(self._presence, self.node_id), found.heartbeat_at
        except psycopg.Error as exc:
            raise translate(exc, "write") from exc

    def _keep_presence(self) -> None:
        """Check the presence session; a broken one (the database restarted, the
        session was terminated) is replaced and the lock taken again (blocking).

        Raises:
            Fenced: another process holds the id's lock now.
            StoreUnavailable: the server cannot be reached (try again).
        """
        with self._presence_guard:
            conn = self._presence
            if conn is not None and not conn.closed:
                try:
                    conn.execute("SELECT 1")
                    return
                except psycopg.Error:
                    conn.close()
            fresh = connect(self._url)
            try:
                held = nodes.take_presence(fresh, self.node_id)
            except psycopg.Error as exc:
                fresh.close()
                raise translate(exc, "write") from exc
            if not held:
                fresh.close()
                raise Fenced(
                    f"node id {self.node_id} is held by another process (this node's "
                    "presence session was lost, by a database restart or a terminated "
                    "session); this node stops"
                )
            self._presence = fresh

    def task_store(self, inbox: trio.MemorySendChannel[StoreRequest]) -> PgStore:
        """The task store over the actor's ``inbox``."""
        return PgStore(inbox, self.counters, self.node_id)

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
            node_id=self.node_id,
            task_status=task_status,
        )

    # --- the cluster session: heartbeat and leases (taskplane.cluster's protocols) ---

    async def heartbeat(self) -> None:
        """Renew this node's registry row (see :func:`nodes.heartbeat`).

        First checks the presence session (:meth:`_keep_presence`): a new session
        takes the id's lock again.

        Raises:
            Fenced: another process took this node's id over, or holds its lock.
            StoreUnavailable: the database cannot be reached (try again).
        """
        await trio.to_thread.run_sync(
            self._keep_presence, abandon_on_cancel=True, limiter=self.cluster.threads
        )
        await self.cluster.run(
            partial(nodes.heartbeat, node_id=self.node_id, instance=self.instance)
        )

    async def acquire(self, name: str, ttl_s: float) -> int | None:
        """See :func:`leases.acquire` (raises ``StoreUnavailable``)."""
        return await self.cluster.run(lambda conn: leases.acquire(conn, name, self.node_id, ttl_s))

    async def renew(self, name: str, epoch: int, ttl_s: float) -> bool:
        """See :func:`leases.renew` (raises ``StoreUnavailable``)."""
        return await self.cluster.run(
            lambda conn: leases.renew(conn, name, self.node_id, epoch, ttl_s)
        )

    async def release(self, name: str, epoch: int) -> None:
        """See :func:`leases.release` (raises ``StoreUnavailable``)."""
        await self.cluster.run(lambda conn: leases.release(conn, name, self.node_id, epoch))

    async def prune(self) -> tuple[int, int]:
        """Remove dead nodes' rows and long-expired leases; return (nodes, leases)."""
        return await self.cluster.run(lambda conn: (nodes.prune(conn), leases.prune(conn)))

    def close(self) -> None:
        """Deregister the node, then close every session (idempotent; blocking)."""
        if not self.sessions:
            return
        try:
            self.cluster.call(
                partial(nodes.deregister, node_id=self.node_id, instance=self.instance)
            )
        except Exception:  # the row expires on its own
            pass
        finally:
            self._close_cluster()
            self._close_sessions()

    def _close_cluster(self) -> None:
        """Close the cluster sessions, the presence session (its lock) last."""
        self.cluster.close()
        with self._presence_guard:
            presence, self._presence = self._presence, None
        if presence is not None:
            presence.close()

    def _close_sessions(self) -> None:
        for session in self.sessions:
            session.close()
        self.sessions = []
