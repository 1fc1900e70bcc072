"""One node per database, until cluster mode lands.

The PostgreSQL store is correct for one taskplane process per database: the wake
queue, turn authority, claim index and page-token key are still that process's
memory (leases, epochs, cluster-wide admission and doorbells are not built yet). So a
node holds a session advisory lock (:data:`NODE_LOCK`) on a session of its own for
its whole life, and a second node on the same database is refused at startup with
:class:`~taskplane.errors.StoreLocked`, as a second process on one SQLite store root
is (design rule "One process per store").

A node that stops releases the lock explicitly. The server releases it when the
holder's session ends: within milliseconds when the process dies (its socket
closes), and within about 25 s when its host vanishes (the lock session asks the
server for TCP keepalives every 5 s after 10 s idle, 3 probes). A starting node
waits up to :data:`WAIT_S` for the lock before it is refused.

Blocking: call from a worker thread.
"""

from __future__ import annotations

import psycopg

from taskplane.errors import StoreLocked, StoreUnavailable
from taskplane.store.postgres.database import connect, redacted

NODE_LOCK = 0x7461736B6E6F6465
"""The advisory-lock key a live node holds (``"tasknode"`` as a 64-bit int)."""

WAIT_S = 2
"""How long a starting node waits for the lock before it is refused: a node that just
stopped or died is given time to have its session ended by the server."""

_KEEPALIVES = (
    "SELECT set_config('tcp_keepalives_idle', '10', false),"
    " set_config('tcp_keepalives_interval', '5', false),"
    " set_config('tcp_keepalives_count', '3', false)"
)


class NodeLock:
    """The node lock on the database at ``url``, held until :meth:`release`.

    Raises:
        StoreLocked: another live node holds it; the message names the database and
            the holder's session (application name, client address, backend pid).
        StoreUnavailable: the server cannot be reached.
    """

    def __init__(self, url: str) -> None:
        conn = connect(url)
        try:
            conn.execute(_KEEPALIVES)
            conn.execute(f"SET lock_timeout = '{WAIT_S * 1000}ms'")
            try:
                conn.execute("SELECT pg_advisory_lock(%s)", (NODE_LOCK,))
            except psycopg.errors.LockNotAvailable:
                raise StoreLocked(
                    f"the task store at {redacted(url)} is in use by another taskplane "
                    f"node ({_holder(conn)}); one node per database until cluster mode "
                    "lands. Stop it, or give this node a database of its own."
                ) from None
            conn.execute("RESET lock_timeout")
        except psycopg.Error as exc:
            conn.close()
            raise StoreUnavailable(f"cannot lock the task store at {redacted(url)}: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        self._conn: psycopg.Connection[tuple[object, ...]] | None = conn

    def release(self) -> None:
        """Drop the lock, then close its session (idempotent). The unlock is
        explicit, so a node started right after this one stopped is not refused."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            try:
                conn.execute("SELECT pg_advisory_unlock(%s)", (NODE_LOCK,))
            except psycopg.Error:
                pass  # the session is gone: the server dropped the lock with it
            finally:
                conn.close()


def _holder(conn: psycopg.Connection[tuple[object, ...]]) -> str:
    """Who holds :data:`NODE_LOCK`, as far as this session may see."""
    row = conn.execute(
        "SELECT a.pid, a.application_name, a.client_addr::text FROM pg_locks l"
        " JOIN pg_stat_activity a ON a.pid = l.pid"
        " WHERE l.locktype = 'advisory' AND l.granted"
        " AND ((l.classid::bigint << 32) | l.objid::bigint) = %s LIMIT 1",
        (NODE_LOCK,),
    ).fetchone()
    if row is None:
        return "holder unknown"
    pid, app, addr = row
    return f"backend pid {pid}, {app or 'no application name'}, from {addr or 'a local socket'}"
