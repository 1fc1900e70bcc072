"""The doorbell's PostgreSQL half: rung after a batch commits, heard on a LISTEN session.

Design rule "Streaming shows what happens after you connect", on several nodes. A
doorbell is only a hint: the record of a change is its row (``task_events``, the
claim), committed before the bell rings, and a node that missed a bell finds the
change on its next poll (:mod:`taskplane.cluster.events`). So the bell is rung after
the COMMIT, never inside the transaction (a NOTIFY inside a transaction takes a
database-wide lock held across the WAL flush, which stops group commit), as one
statement of its own (its own implicit transaction, one round trip) that does not
wait for a WAL flush, once per batch.

Payload: space-separated rings, at most :data:`MAX_PAYLOAD` bytes per NOTIFY (more
rings are split over several), each payload of a node opened by its name:

* ``n:<node id>``: the node that rang (so a node can tell its own rings);
* ``t:<task id>:<version>``: that version of the Task is committed;
* ``c``: claims were recorded (the claims tail reads them);
* ``w``: a wake may be waiting (given to the wake hook of each node).

The channel is per database schema (``taskplane:<schema>``), so stores sharing one
database never hear each other. What the rings mean to a node is
:mod:`taskplane.cluster.doorbell`'s; this module writes and reads them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator

import attrs
import psycopg
from psycopg import sql

from taskplane.errors import StoreUnavailable
from taskplane.store.postgres.database import connect
from taskplane.store.postgres.schema import Connection
from taskplane.store.records import Accepted, StoredTask

log = logging.getLogger("taskplane.store")

MAX_PAYLOAD = 7000
"""Bytes per NOTIFY payload (PostgreSQL's limit is 8000)."""

CLAIMS = "c"
WAKE = "w"

RING_SQL = (
    "SELECT set_config('synchronous_commit', 'off', true),"
    " pg_notify('taskplane:' || current_schema(), %s)"
)
"""Rings one payload (the channel is derived from the session's schema, as
:class:`Listener` reads it). ``synchronous_commit`` is off for this transaction
only (the statement's own, when it runs alone): a doorbell need not be durable, and
its commit must not wait for a flush."""

CHANNEL_SQL = "SELECT 'taskplane:' || current_schema()"
"""The listening side's channel name, read once on its session."""


@attrs.frozen
class Rings:
    """What a store op's value may carry to ring beside what its type says
    (:func:`rings_of`): e.g. ``Rings((WAKE,))`` for an op that created a wake row."""

    rings: tuple[str, ...]


def rings_of(value: object) -> Iterator[str]:
    """The rings a committed op's ``value`` asks for: a Task version stored (``t``),
    an acceptance (its claim, its Task's version, and a wake for a created or
    continued Task unless the acceptance claimed that turn itself: its wake is born
    running, so no other node may claim it), or a :class:`Rings`; nothing for
    anything else."""
    if isinstance(value, StoredTask):
        yield task_ring(value.task.id, value.version)
    elif isinstance(value, Accepted):
        if value.disposition != "duplicate":
            yield CLAIMS
            if value.stored is not None:
                yield task_ring(value.stored.task.id, value.stored.version)
                if value.fence is None:
                    yield WAKE
    elif isinstance(value, Rings):
        yield from value.rings


def task_ring(task_id: str, version: int) -> str:
    """The ring of ``version`` of ``task_id``."""
    return f"t:{task_id}:{version}"


def parse_task_ring(ring: str) -> tuple[str | None, int]:
    """``(task id, version)`` of a :func:`task_ring`; ``(None, 0)`` for any other."""
    if ring.startswith("t:"):
        task_id, _, version = ring[2:].rpartition(":")
        if task_id and version.isdigit():
            return task_id, int(version)
    return None, 0


def sender_token(node_id: str) -> str:
    """The token that opens each payload a node rings (``n:<node id>``)."""
    return f"n:{node_id}"


def payloads(rings: Iterable[str], sender: str | None = None) -> list[str]:
    """``rings`` (duplicates dropped, order kept) as NOTIFY payloads of at most
    :data:`MAX_PAYLOAD` bytes, each opened by ``sender``'s token (a node id; ``None``:
    no token)."""
    out: list[str] = []
    first = [] if sender is None else [sender_token(sender)]
    current: list[str] = list(first)
    size = sum(len(t) + 1 for t in first)
    for ring in dict.fromkeys(rings):
        if len(current) > len(first) and size + 1 + len(ring) > MAX_PAYLOAD:
            out.append(" ".join(current))
            current, size = list(first), sum(len(t) + 1 for t in first)
        current.append(ring)
        size += len(ring) + 1
    if len(current) > len(first):
        out.append(" ".join(current))
    return out


def ring(conn: Connection, rings: Iterable[str], sender: str | None = None) -> int:
    """Ring ``rings`` as node ``sender`` (``None``: unnamed, e.g. an operator
    command), one statement per payload (run outside any transaction block, after a
    batch's COMMIT: ``PgConnection.run_alone``); how many payloads."""
    sent = payloads(rings, sender)
    for payload in sent:
        conn.execute(RING_SQL, (payload,))
    return len(sent)


class Listener:
    """One LISTEN session on the doorbell channel (blocking constructor: call it in a
    worker thread). Read it from the trio thread: wait until :meth:`fileno` is
    readable, then :meth:`drain` (which never blocks).

    Args:
        url: the store's libpq URL.
    Raises:
        StoreUnavailable: the server cannot be reached.
    """

    def __init__(self, url: str) -> None:
        conn = connect(url)
        try:
            row = conn.execute(CHANNEL_SQL).fetchone()
            assert row is not None
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(str(row[0]))))
        except psycopg.Error as exc:
            conn.close()
            raise StoreUnavailable(f"cannot listen for the doorbell: {exc}") from exc
        self._conn = conn

    def fileno(self) -> int:
        """The session's socket (readable when a notification may have arrived)."""
        return self._conn.pgconn.socket

    def drain(self) -> list[str]:
        """The payloads arrived so far, oldest first (never blocks).

        Raises:
            StoreUnavailable: the session broke (reconnect with a new listener).
        """
        try:
            found = [n.payload for n in self._conn.notifies(timeout=0)]
        except psycopg.Error as exc:
            raise StoreUnavailable(f"the doorbell session broke: {exc}") from exc
        if self._conn.broken or self._conn.closed:
            raise StoreUnavailable("the doorbell session was closed by the server")
        return found

    def close(self) -> None:
        """Close the session (idempotent)."""
        self._conn.close()
