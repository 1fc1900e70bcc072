"""The node registry: which taskplane nodes share this database, on database time.

Design rule "One process per store" on PostgreSQL: any number of nodes share one
database, but each node id names one live process. A node registers at start
(:func:`register`), renews its heartbeat every third of its lease length
(:func:`heartbeat`) and deregisters when it stops (:func:`deregister`). A row whose
heartbeat is younger than its node's lease length is a live node; a start with the
same id is refused with :class:`~taskplane.errors.StoreLocked`. An expired row is
taken over (the process that wrote it is dead, or cut off from the database long
enough to have fenced itself).

A crashed node restarted at once is not made to wait for its row to expire: each
node holds a session advisory lock on its id for its life (:func:`take_presence`,
on a session of its own), which the server drops as soon as the process's session
ends (within milliseconds when it dies; within about 25 s when its host vanishes,
by TCP keepalives; a start waits up to :data:`PRESENCE_WAIT_S` for it). A start
that gets that lock may take over a row that has not expired yet: no live process
of that id still holds its session. (After a database restart every session is
new, so a second process started with a live node's id then takes the row over; the
first finds its row taken at its next heartbeat and stops: a duplicate id never runs
for longer than that.) The maintenance leader prunes rows dead for longer than
:data:`PRUNE_AFTER_S` (:func:`prune`).

Every node of one database must advertise the same ``A2A_PUBLIC_URL`` (the Agent
Card and the task locators name it): the first node records it in ``meta``, and a
node configured with another one is refused (:class:`PublicUrlMismatch`).

Blocking functions of a psycopg connection; each runs inside a transaction its
caller opened.
"""

from __future__ import annotations

import attrs
import psycopg

from taskplane.errors import Fenced, StoreLocked
from taskplane.store.postgres.schema import SCHEMA_VERSION, Connection

PRESENCE_LOCK = 0x746E6F64
"""The first key of the advisory lock a live node holds on its id (``"tnod"``); the
second is ``hashtext(node_id)``."""
KEEPALIVES = (
    "SELECT set_config('tcp_keepalives_idle', '10', false),"
    " set_config('tcp_keepalives_interval', '5', false),"
    " set_config('tcp_keepalives_count', '3', false)"
)
"""Asks the server to probe the presence session's client (a host that vanished
loses its lock in about 25 s, not hours)."""
PRESENCE_WAIT_S = 2
"""Seconds a starting node waits for its id's presence lock (the server ends a dead
process's session within milliseconds, but not before it notices)."""
PRUNE_AFTER_S = 24 * 3600
"""Seconds a dead node's row is kept for operators before maintenance removes it."""


class PublicUrlMismatch(ValueError):
    """This node's public URL is not the one the database's nodes advertise."""


@attrs.frozen
class NodeRecord:
    """What a node writes about itself when it registers.

    Attributes:
        node_id: ``TASKPLANE_NODE_ID`` (or the generated one).
        instance: random per process start: tells this process's row from a later
            one that took the id over.
        public_url: ``A2A_PUBLIC_URL``.
        host, pid: where the process runs, for operators.
        lease_ttl_s: the node's lease length (how long its heartbeat counts).
    """

    node_id: str
    instance: str
    public_url: str
    host: str
    pid: int
    lease_ttl_s: float


def check_public_url(conn: Connection, public_url: str) -> None:
    """Record ``public_url`` as the database's if none is yet; else compare.

    Raises:
        PublicUrlMismatch: the database's nodes advertise another URL (both named).
    """
    conn.execute(
        "INSERT INTO meta (key, value) VALUES ('public_url', %s) ON CONFLICT (key) DO NOTHING",
        (public_url,),
    )
    row = conn.execute("SELECT value FROM meta WHERE key = 'public_url'").fetchone()
    recorded = str(row[0]) if row else public_url
    if recorded != public_url:
        raise PublicUrlMismatch(
            f"A2A_PUBLIC_URL is {public_url}, but the nodes of this database advertise "
            f"{recorded}; every node of one database must set the same A2A_PUBLIC_URL "
            "(the load balancer's URL)"
        )


def take_presence(conn: Connection, node_id: str) -> bool:
    """Take the presence lock of ``node_id`` on ``conn`` (an autocommit session kept
    open for the node's life), waiting up to :data:`PRESENCE_WAIT_S` for a process
    that just died to have its session ended; ``False`` if another session still
    holds it then."""
    conn.execute(KEEPALIVES)
    conn.execute(f"SET lock_timeout = '{PRESENCE_WAIT_S * 1000}ms'")
    try:
        conn.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (PRESENCE_LOCK, node_id))
    except psycopg.errors.LockNotAvailable:
        return False
    finally:
        conn.execute("RESET lock_timeout")
    return True


def register(conn: Connection, node: NodeRecord, *, present: bool = False) -> None:
    """Register ``node``: insert its row, or take over a row of its id that has
    expired, or any row of its id when ``present`` (this process holds the id's
    presence lock: no other live process of the id has a session).

    One statement, so two processes starting with one id at once cannot both win:
    the second waits for the first's row and then finds it live.

    Raises:
        StoreLocked: a live node (heartbeat younger than its lease length) has this
            id; the message names the id, its host and pid, and its heartbeat's age.
    """
    won = conn.execute(
        "INSERT INTO nodes (node_id, instance, public_url, host, pid, lease_ttl_s,"
        " schema_version, started_at, heartbeat_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, now(), now())"
        " ON CONFLICT (node_id) DO UPDATE SET instance = excluded.instance,"
        " public_url = excluded.public_url, host = excluded.host, pid = excluded.pid,"
        " lease_ttl_s = excluded.lease_ttl_s, schema_version = excluded.schema_version,"
        " started_at = now(), heartbeat_at = now()"
        " WHERE nodes.heartbeat_at + make_interval(secs => nodes.lease_ttl_s) <= now()"
        " OR %s"
        " RETURNING node_id",
        (
            node.node_id,
            node.instance,
            node.public_url,
            node.host,
            node.pid,
            node.lease_ttl_s,
            SCHEMA_VERSION,
            present,
        ),
    ).fetchone()
    if won is not None:
        return
    row = conn.execute(
        "SELECT host, pid, extract(epoch FROM now() - heartbeat_at)::float8 FROM nodes"
        " WHERE node_id = %s",
        (node.node_id,),
    ).fetchone()
    host, pid, age = row if row else ("an unknown host", 0, 0.0)
    raise StoreLocked(
        f"node id {node.node_id} is in use by a live taskplane node (on {host}, pid {pid}, "
        f"last heartbeat {age:.1f} s ago); give this node another TASKPLANE_NODE_ID, or "
        "wait one lease length if that node is gone"
    )


def heartbeat(conn: Connection, node_id: str, instance: str) -> None:
    """Renew this process's row (database time).

    Raises:
        Fenced: the row is gone or belongs to a later process: this node was cut off
            past its lease and another process took its id over; it must stop.
    """
    done = conn.execute(
        "UPDATE nodes SET heartbeat_at = now() WHERE node_id = %s AND instance = %s",
        (node_id, instance),
    ).rowcount
    if done != 1:
        raise Fenced(
            f"node id {node_id} was taken over by another process while this one could "
            "not renew its heartbeat; this node stops"
        )


def deregister(conn: Connection, node_id: str, instance: str) -> None:
    """Remove this process's row (a clean stop); a row taken over is left alone."""
    conn.execute("DELETE FROM nodes WHERE node_id = %s AND instance = %s", (node_id, instance))


def prune(conn: Connection) -> int:
    """Remove the rows of nodes dead for over :data:`PRUNE_AFTER_S`; return how many."""
    return conn.execute(
        "DELETE FROM nodes WHERE heartbeat_at + make_interval(secs => lease_ttl_s + %s) < now()",
        (PRUNE_AFTER_S,),
    ).rowcount


@attrs.frozen
class NodeRow:
    """One registered node as operators see it (times in seconds since the epoch)."""

    node_id: str
    public_url: str
    host: str
    pid: int
    schema_version: int
    started_at_s: float
    heartbeat_age_s: float
    live: bool


def list_nodes(conn: Connection) -> tuple[NodeRow, ...]:
    """Every registered node, by id."""
    rows = conn.execute(
        "SELECT node_id, public_url, host, pid, schema_version,"
        " extract(epoch FROM started_at)::float8,"
        " extract(epoch FROM now() - heartbeat_at)::float8,"
        " heartbeat_at + make_interval(secs => lease_ttl_s) > now()"
        " FROM nodes ORDER BY node_id"
    ).fetchall()
    return tuple(NodeRow(*row) for row in rows)
