"""Agent sessions kept in the database: one ``agent_sessions`` row per Task session.

On a PostgreSQL store a Task's next turn may run on another node, so the ``openai``
runtime's transcript (its conversation with the model) lives here, not under a
node's store root. A row of ``agent_sessions`` (created by the schema step
:data:`~taskplane.store.postgres.schema.AGENT_SESSIONS`) holds the Task id (primary
key), the session id, the model profile and the messages (JSON text, exactly as the
runtime wrote them) and a ``version`` that every save moves by one.

A save is one of the turn's writes (design rule "Turn authority is a lease"): its
transaction first checks the turn's fence (:func:`~taskplane.store.postgres.wakes.check_fences`,
the check every write of a turn makes) and then replaces the
row by compare-and-swap on ``version``, so a node whose lease moved, or a copy read
before another turn saved, writes nothing. Rows are pruned with their Task
(:func:`prune`, run by compaction).

:class:`PgSessionStore` submits these ops to the store actor (the store's own
sessions and batches); the functions are blocking functions of a connection, called
only inside store ops.
"""

from __future__ import annotations

import trio

from taskplane.errors import VersionConflict
from taskplane.store.postgres.schema import Connection
from taskplane.store.postgres.wakes import check_fences
from taskplane.store.records import Fence
from taskplane.store.requests import StoreRequest, submit
from taskplane.store.sessions import SessionRow


def load(conn: Connection, task_id: str, unless_version: int = 0) -> SessionRow | None:
    """``task_id``'s session, or ``None`` when it has none or its version is
    ``unless_version`` (the caller's copy is current)."""
    row = conn.execute(
        "SELECT session_id, profile_json, messages_json, version FROM agent_sessions"
        " WHERE task_id = %s AND version <> %s",
        (task_id, unless_version),
    ).fetchone()
    if row is None:
        return None
    return SessionRow(task_id, row[0], row[1], row[2], int(row[3]))


def save(conn: Connection, row: SessionRow, fence: Fence | None) -> int:
    """Replace the session stored at version ``row.version`` (0: none stored yet)
    with ``row``; return the new version.

    Args:
        fence: the turn's lease, checked first (``wakes.check_fences``); ``None``: a
            write under no lease.
    Raises:
        Fenced: ``fence`` is no longer current.
        VersionConflict: the stored version is not ``row.version``.
    """
    if fence is not None:
        check_fences(conn, (fence,))
    if row.version == 0:
        found = conn.execute(
            "INSERT INTO agent_sessions (task_id, session_id, profile_json, messages_json,"
            " version) VALUES (%s, %s, %s, %s, 1) ON CONFLICT (task_id) DO NOTHING"
            " RETURNING version",
            (row.task_id, row.session_id, row.profile_json, row.messages_json),
        ).fetchone()
    else:
        found = conn.execute(
            "UPDATE agent_sessions SET profile_json = %s, messages_json = %s,"
            " version = version + 1, saved_at = now()"
            " WHERE task_id = %s AND version = %s RETURNING version",
            (row.profile_json, row.messages_json, row.task_id, row.version),
        ).fetchone()
    if found is None:
        raise VersionConflict(
            f"the agent session of task {row.task_id} moved past version {row.version}"
        )
    return int(found[0])


def prune(conn: Connection) -> int:
    """Delete the sessions whose Task is gone; return how many (compaction)."""
    return conn.execute(
        "DELETE FROM agent_sessions s"
        " WHERE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.task_id = s.task_id)"
    ).rowcount


class PgSessionStore:
    """The :class:`~taskplane.store.sessions.SessionStore` of a PostgreSQL store,
    through its store actor.

    Args:
        inbox: the send end of the store actor's inbox (as :class:`PgStore`'s).
    """

    def __init__(self, inbox: trio.MemorySendChannel[StoreRequest]) -> None:
        self._inbox = inbox

    async def load(self, task_id: str, unless_version: int = 0) -> SessionRow | None:
        """See :func:`load`.

        Raises:
            StoreUnavailable: the database could not be read.
        """
        return await submit(self._inbox, lambda conn: load(conn, task_id, unless_version))

    async def save(self, row: SessionRow, fence: Fence | None) -> int:
        """See :func:`save`; committed before it returns.

        Raises:
            Fenced, VersionConflict: as :func:`save`; nothing was written.
            StoreUnavailable: the transaction could not commit.
        """
        return await submit(self._inbox, lambda conn: save(conn, row, fence))
