"""What other nodes read of this database's changes: Task versions and new claims.

Design rules "One writer per Task" and "Streaming shows what happens after you
connect". Every committed version of a Task is a row of ``task_events``, written by a
trigger in the write's own transaction (schema step ``_TASK_EVENTS``), so a version is
readable exactly when it is committed, in version order, whoever wrote it. A node
follows a Task by its version, never by a global sequence (a sequence number is
allocated before commit, so a lower one can become visible after a higher one was
read).

New claims are followed by transaction id: each journal row carries the id of the
transaction that wrote it (``xid``). A read records the snapshot it ran under; the
next read takes exactly the claims that snapshot could not see (written by a
transaction at or after its ``xmax``, or in its list of transactions still running),
so a claim committed late by a transaction that started early is read on the next
round, never skipped (:class:`ClaimCursor`).

Blocking functions of a psycopg connection (run only inside store ops), and
:class:`PgChangeFeed`, which hands them to the store actor.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs
import trio

from taskplane.model.codec import decode_json
from taskplane.model.types import Task
from taskplane.store.postgres import tasks
from taskplane.store.postgres.schema import Connection
from taskplane.store.records import StoredTask
from taskplane.store.requests import StoreRequest, submit

EVENTS_KEEP_MS = 10 * 60 * 1000
"""How long a Task version's record is kept (compaction prunes older ones, and those
of pruned Tasks): a node whose snapshot is older catches up in one step."""

_VERSIONS_AFTER = (
    "SELECT version, task_json, recorded_at_ms FROM task_events"
    " WHERE task_id = %s AND version > %s AND version <= %s ORDER BY version"
)
_CURRENT_VERSIONS = "SELECT task_id, version FROM tasks WHERE task_id = ANY(%s::text[])"
_NEW_CLAIMS = (
    "SELECT pg_current_snapshot()::text, j.provider_key"
    " FROM (SELECT 1) s LEFT JOIN journal j ON j.kind = 'CLAIM'"
    " AND (j.xid >= %(xmax)s::xid8 OR j.xid = ANY(%(xip)s::xid8[]))"
)
_SNAPSHOT = "SELECT pg_current_snapshot()::text"


def versions_after(conn: Connection, task_id: str, version: int) -> tuple[StoredTask, ...]:
    """The committed versions of ``task_id`` newer than ``version``, oldest first, the
    last being the Task row as stored now; versions whose records were pruned are
    skipped (``()``: nothing newer, or the Task is gone).

    The Task row is read first: every version up to its version is committed, so the
    records read next hold all of them that were not pruned.
    """
    current = tasks.load(conn, task_id)
    if current is None or current.version <= version:
        return ()
    rows = conn.execute(_VERSIONS_AFTER, (task_id, version, current.version - 1)).fetchall()
    older = tuple(
        StoredTask(decode_json(text, Task), current.scope, current.source, int(v), int(at))
        for v, text, at in rows
    )
    return (*older, current)


def current_versions(conn: Connection, task_ids: Sequence[str]) -> dict[str, int]:
    """Task id -> its stored version, for those of ``task_ids`` still stored."""
    return {str(t): int(v) for t, v in conn.execute(_CURRENT_VERSIONS, (list(task_ids),))}


def prune(conn: Connection, now_ms: int) -> int:
    """Delete the version records older than :data:`EVENTS_KEEP_MS` and those of Tasks
    that are gone; how many were deleted (a compaction step)."""
    old = conn.execute(
        "DELETE FROM task_events WHERE recorded_at_ms < %s", (now_ms - EVENTS_KEEP_MS,)
    ).rowcount
    gone = conn.execute(
        "DELETE FROM task_events e WHERE NOT EXISTS"
        " (SELECT 1 FROM tasks t WHERE t.task_id = e.task_id)"
    ).rowcount
    return old + gone


@attrs.frozen
class ClaimCursor:
    """Where a claims tail stands: the snapshot of its last read, as PostgreSQL's
    ``pg_snapshot`` text (``xmin:xmax:xip,...``). The claims that snapshot could not
    see were written by a transaction with id >= ``xmax`` or in ``xip``."""

    snapshot: str

    @property
    def xmax(self) -> int:
        """The first transaction id the snapshot saw as not yet started."""
        return int(self.snapshot.split(":")[1])

    @property
    def xip(self) -> list[int]:
        """The transactions the snapshot saw running (their writes invisible to it)."""
        listed = self.snapshot.split(":")[2]
        return [int(x) for x in listed.split(",") if x]


def claim_cursor(conn: Connection) -> ClaimCursor:
    """A cursor at the current snapshot (the claims visible now count as read)."""
    row = conn.execute(_SNAPSHOT).fetchone()
    assert row is not None
    return ClaimCursor(str(row[0]))


def claims_after(conn: Connection, cursor: ClaimCursor) -> tuple[ClaimCursor, list[str]]:
    """The provider keys of the claims ``cursor``'s snapshot could not see and this
    statement's snapshot sees, and the cursor at this statement's snapshot (one
    statement: the rows and the snapshot are the same snapshot's)."""
    rows = conn.execute(
        _NEW_CLAIMS, {"xmax": str(cursor.xmax), "xip": [str(x) for x in cursor.xip]}
    )
    found = rows.fetchall()
    keys = [str(key) for _, key in found if key is not None]
    return ClaimCursor(str(found[0][0])), keys


class PgChangeFeed:
    """The reads of :mod:`this module <taskplane.store.postgres.events>` through the
    store actor (one store op each). Implements
    :class:`~taskplane.actors.owner.TaskHistory`.

    Args:
        inbox: the send end of the store actor's inbox.
    Raises (every method):
        StoreUnavailable: the store cannot be read.
        ActorGone: the store actor stopped.
    """

    def __init__(self, inbox: trio.MemorySendChannel[StoreRequest]) -> None:
        self._inbox = inbox

    async def versions_after(self, task_id: str, version: int) -> tuple[StoredTask, ...]:
        """See :func:`versions_after`."""
        return await submit(self._inbox, lambda conn: versions_after(conn, task_id, version))

    async def current_versions(self, task_ids: Iterable[str]) -> dict[str, int]:
        """See :func:`current_versions`."""
        ids = list(task_ids)
        if not ids:
            return {}
        return await submit(self._inbox, lambda conn: current_versions(conn, ids))

    async def claim_cursor(self) -> ClaimCursor:
        """See :func:`claim_cursor`."""
        return await submit(self._inbox, claim_cursor)

    async def claims_after(self, cursor: ClaimCursor) -> tuple[ClaimCursor, list[str]]:
        """See :func:`claims_after`."""
        return await submit(self._inbox, lambda conn: claims_after(conn, cursor))
