"""Leader leases: work only one node may do at a time, on database time.

Design rule "Leader work runs under a lease": a lease ``name`` (such as
``source:slack``, ``deliverer``, ``maintenance``) is held by one node until
``expires_at`` (the database's ``now()`` plus the lease length). Acquiring takes a
free, expired, or already own lease and adds one to its ``epoch``; renewing extends
it only for the same node *and* epoch; releasing ends it at once. A write fenced by
a lease (a source's checkpoint, :func:`check_fence`) checks, in its own
transaction, that the lease is still this node's at this epoch and not expired,
and holds a share lock on the lease row until it commits, so a takeover waits for
it and every write after the takeover is refused.

Blocking functions of a psycopg connection; each runs inside a transaction its
caller opened.
"""

from __future__ import annotations

from taskplane.errors import Fenced
from taskplane.store.postgres.schema import Connection
from taskplane.store.source_store import LeaseFence


def acquire(conn: Connection, name: str, node_id: str, ttl_s: float) -> int | None:
    """Take lease ``name`` for ``ttl_s`` seconds if it is free, expired or this
    node's; return its new epoch (the previous one plus one, 1 for a new lease), or
    ``None`` while another node holds it."""
    row = conn.execute(
        "INSERT INTO leases (name, node_id, epoch, expires_at)"
        " VALUES (%s, %s, 1, now() + make_interval(secs => %s))"
        " ON CONFLICT (name) DO UPDATE SET node_id = excluded.node_id,"
        " epoch = leases.epoch + 1, expires_at = excluded.expires_at"
        " WHERE leases.expires_at <= now() OR leases.node_id = excluded.node_id"
        " RETURNING epoch",
        (name, node_id, ttl_s),
    ).fetchone()
    return None if row is None else int(row[0])


def renew(conn: Connection, name: str, node_id: str, epoch: int, ttl_s: float) -> bool:
    """Extend lease ``name`` by ``ttl_s`` seconds from now if this node still holds it
    at ``epoch`` and it has not expired; ``False``: it is lost (stop its work)."""
    return (
        conn.execute(
            "UPDATE leases SET expires_at = now() + make_interval(secs => %s)"
            " WHERE name = %s AND node_id = %s AND epoch = %s AND expires_at > now()",
            (ttl_s, name, node_id, epoch),
        ).rowcount
        == 1
    )


def release(conn: Connection, name: str, node_id: str, epoch: int) -> None:
    """End lease ``name`` now if this node holds it at ``epoch`` (the next acquirer
    need not wait for it to expire); a lease already moved is left alone."""
    conn.execute(
        "UPDATE leases SET expires_at = now() WHERE name = %s AND node_id = %s AND epoch = %s",
        (name, node_id, epoch),
    )


def check_fence(conn: Connection, fence: LeaseFence) -> None:
    """Refuse the transaction's write unless ``fence`` is the current, unexpired lease;
    share-lock the lease row until the transaction ends.

    Raises:
        Fenced: the lease moved, or expired on database time.
    """
    row = conn.execute(
        "SELECT 1 FROM leases WHERE name = %s AND node_id = %s AND epoch = %s"
        " AND expires_at > now() FOR SHARE",
        (fence.name, fence.node_id, fence.epoch),
    ).fetchone()
    if row is None:
        raise Fenced(
            f"lease {fence.name} epoch {fence.epoch} is no longer node {fence.node_id}'s; "
            "nothing was recorded"
        )


def prune(conn: Connection) -> int:
    """Remove leases expired for over a day (their next acquirer starts again at
    epoch 1, which is safe: no write fenced by the old epochs can still succeed,
    since each checks an unexpired lease); return how many."""
    return conn.execute("DELETE FROM leases WHERE expires_at < now() - interval '1 day'").rowcount
