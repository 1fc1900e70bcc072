"""The node registry: which taskplane nodes share this database, on database time.

Design rule "One process per store" on PostgreSQL: any number of nodes share one
database, but each node id names one live process. A node registers at start
(:func:`register`), renews its heartbeat every third of its lease length
(:func:`heartbeat`) and deregisters when it stops (:func:`deregister`). A row whose
heartbeat is younger than its node's lease length is a live node's.

Each node also holds a session advisory lock on its id for its life
(:func:`take_presence`, on a session of its own). The server drops it as soon as
that session ends: within milliseconds when the process dies, within about 25 s
when its host vanishes (TCP keepalives), and for every node at once when the
database restarts or an operator terminates the session. So a free lock does not
prove the id's process is gone, and the two sides keep one process per id:

- the heartbeat checks its presence session first; a session that is new (the old
  one broke: reconnect) takes the lock again, and if another process holds it the
  node stops as for a takeover (:class:`~taskplane.errors.Fenced`);
- a start (:func:`probe`, :func:`register`) takes over a row of its id only if the
  row has expired, or if it holds the lock *and* the row's heartbeat did not move
  for :func:`renewal_wait_s` (a bit over a third of the row's lease length, while
  the start does not hold the lock, so a live node's heartbeat can take it back).
  A live node renews within that time, and the start is refused with
  :class:`~taskplane.errors.StoreLocked`; a crashed node restarted with its own id
  starts after that wait, without waiting for its row to expire.

The maintenance leader prunes rows dead for longer than :data:`PRUNE_AFTER_S`
(:func:`prune`).

Every live node of one database advertises the same ``A2A_PUBLIC_URL`` (the Agent
Card and the task locators name it) and uses the same lease length
(:func:`check_peers`): a start configured otherwise than a live node is refused
(:class:`PeerMismatch`, naming that node); a start while no other node is live sets
them (the URL is recorded in ``meta``; a change is logged ``public_url_changed``).

Blocking functions of a psycopg connection; each runs inside a transaction its
caller opened.
"""

from __future__ import annotations

import datetime
import logging

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
RENEWAL_MARGIN_S = 1.0
"""Seconds a start waits beyond a third of a young row's lease length for the
row's heartbeat to move (a heartbeat's own round trip, a busy host)."""
PRUNE_AFTER_S = 24 * 3600
"""Seconds a dead node's row is kept for operators before maintenance removes it."""


log = logging.getLogger("taskplane.store")


class PeerMismatch(ValueError):
    """This node's public URL or lease length is not the one a live node of the
    database uses (the message names both and the node)."""


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


def check_peers(conn: Connection, node: NodeRecord) -> None:
    """Compare ``node``'s public URL and lease length with the other live nodes';
    with none live, record its URL as the database's (logging ``public_url_changed``
    when it replaces another).

    Serialized with every other start by a transaction-level advisory lock, so two
    nodes starting at once with different settings cannot both pass.

    Raises:
        PeerMismatch: a live node (another id, heartbeat younger than its lease
            length) advertises another URL or uses another lease length.
    """
    conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (PRESENCE_LOCK,))
    live = conn.execute(
        "SELECT node_id, public_url, lease_ttl_s FROM nodes WHERE node_id <> %s"
        " AND heartbeat_at + make_interval(secs => lease_ttl_s) > now() ORDER BY node_id",
        (node.node_id,),
    ).fetchall()
    for other_id, other_url, other_ttl in live:
        if other_url != node.public_url:
            raise PeerMismatch(
                f"A2A_PUBLIC_URL is {node.public_url}, but the live node {other_id} of this "
                f"database advertises {other_url}; every live node of one database must set "
                "the same A2A_PUBLIC_URL (the load balancer's URL): to change it, stop every "
                "node and start them with the new one"
            )
        if float(other_ttl) != node.lease_ttl_s:
            raise PeerMismatch(
                f"TASKPLANE_LEASE_TTL_S is {node.lease_ttl_s:g}, but the live node {other_id} "
                f"of this database uses {float(other_ttl):g}; every live node of one database "
                "must set the same TASKPLANE_LEASE_TTL_S: to change it, stop every node and "
                "start them with the new one"
            )
    row = conn.execute("SELECT value FROM meta WHERE key = 'public_url'").fetchone()
    if row is not None and str(row[0]) == node.public_url:
        return
    conn.execute(
        "INSERT INTO meta (key, value) VALUES ('public_url', %s)"
        " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (node.public_url,),
    )
    if row is not None:
        log.warning(
            "A2A_PUBLIC_URL changed from %s to %s (no node was live)",
            row[0],
            node.public_url,
            extra={"event": "public_url_changed", "old": str(row[0]), "new": node.public_url},
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


def release_presence(conn: Connection, node_id: str) -> None:
    """Give back the presence lock of ``node_id`` taken on ``conn``."""
    conn.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (PRESENCE_LOCK, node_id))


@attrs.frozen
class Probe:
    """A row of the starting node's id as the start found it.

    Attributes:
        heartbeat_at: the row's heartbeat (database time).
        young: the heartbeat is younger than the row's lease length.
        lease_ttl_s: the row's lease length, seconds.
    """

    heartbeat_at: datetime.datetime
    young: bool
    lease_ttl_s: float


def probe(conn: Connection, node_id: str) -> Probe | None:
    """The row of ``node_id``, or ``None`` when there is none."""
    row = conn.execute(
        "SELECT heartbeat_at, heartbeat_at + make_interval(secs => lease_ttl_s) > now(),"
        " lease_ttl_s FROM nodes WHERE node_id = %s",
        (node_id,),
    ).fetchone()
    return None if row is None else Probe(row[0], bool(row[1]), float(row[2]))


def renewal_wait_s(lease_ttl_s: float) -> float:
    """Seconds after which a live node of lease length ``lease_ttl_s`` has renewed
    its heartbeat for sure: a third of it plus :data:`RENEWAL_MARGIN_S`."""
    return lease_ttl_s / 3 + RENEWAL_MARGIN_S


def register(
    conn: Connection,
    node: NodeRecord,
    *,
    present: bool = False,
    seen: datetime.datetime | None = None,
) -> None:
    """Register ``node``: insert its row, or take over a row of its id that has
    expired, or, when ``present`` (this process holds the id's presence lock), the
    row whose heartbeat is still ``seen`` (the start saw it, then waited
    :func:`renewal_wait_s` without the lock: it did not move, so no live process
    renews it).

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
        " OR (%s AND nodes.heartbeat_at = %s)"
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
            seen,
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
