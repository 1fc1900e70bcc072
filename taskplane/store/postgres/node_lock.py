"""One node per database, until cluster mode lands.

The PostgreSQL store is correct for one taskplane process per database: the wake
queue, turn authority, claim index and page-token key are still that process's
memory (leases, epochs, cluster-wide admission and doorbells are not built yet). So a
node holds a session advisory lock (:data:`NODE_LOCK`) on a session of its own for
its whole life, and a second node on the same database is refused at startup with
:class:`~taskplane.errors.StoreLocked`, as a second process on one SQLite store root
is (design rule "One process per store").

The server releases the lock when the holder's session ends: at once when the
process dies (its socket closes), and within about 25 s when its host vanishes (the
lock session asks the server for TCP keepalives every 5 s after 10 s idle, 3 probes).

Blocking: call from a worker thread.
"""

from __future__ import annotations

import psycopg

from taskplane.errors import StoreLocked, StoreUnavailable
from taskplane.store.postgres.database import connect, redacted

NODE_LOCK = 0x7461736B6E6F6465
"""The advisory-lock key a live node holds (``"tasknode"`` as a 64-bit int)."""

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
            row = conn.execute("SELECT pg_try_advisory_lock(%s)", (NODE_LOCK,)).fetchone()
            if not row or not row[0]:
                holder = _holder(conn)
                raise StoreLocked(
                    f"the task store at {redacted(url)} is in use by another taskplane "
                    f"node ({holder}); one node per database until cluster mode lands. "
                    "Stop it, or give this node a database of its own."
                )
        except psycopg.Error as exc:
            conn.close()
            raise StoreUnavailable(f"cannot lock the task store at {redacted(url)}: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        self._conn: psycopg.Connection[tuple[object, ...]] | None = conn

    def release(self) -> None:
        """Drop the lock by closing its session (idempotent)."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
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
