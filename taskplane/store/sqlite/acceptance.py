"""SQLite's half of the acceptance transaction (:mod:`taskplane.store.acceptance`
decides; this module reads and writes): the claim, Task, anchor, origin, evidence
and context statements of one ``sqlite3.Connection``.

Design rules "Task and conversation semantics" and "Contract decisions". The store
actor serializes every transaction on its one connection, so an acceptance needs no
lock of its own: the second of two acceptances of one identity finds the first's
claim.

Blocking functions of a ``sqlite3.Connection``, called only inside store ops.
"""

from __future__ import annotations

import sqlite3

from taskplane.model.types import Message
from taskplane.scope import Scope
from taskplane.store import acceptance as decide
from taskplane.store.records import Accepted, Activation, Locator
from taskplane.store.sqlite import anchors, evidence, journal, tasks

_UPSERT_CONTEXT = (
    "INSERT INTO contexts (tenant, principal, source, conversation_key, context_id,"
    " last_active_at_ms) VALUES (?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (tenant, principal, source, conversation_key)"
    " DO UPDATE SET last_active_at_ms = excluded.last_active_at_ms"
)


class _Recorder:
    """The :class:`~taskplane.store.acceptance.AcceptanceRecorder` of SQLite."""

    find_claim = staticmethod(journal.find_claim)
    forget_activation = staticmethod(journal.forget_activation)
    load = staticmethod(tasks.load)
    load_scoped = staticmethod(tasks.load_scoped)
    insert = staticmethod(tasks.insert)
    update = staticmethod(tasks.update)
    lookup_anchor = staticmethod(anchors.lookup)
    append_journal = staticmethod(journal.append)
    append_evidence = staticmethod(evidence.append)

    @staticmethod
    def wake_settled(conn: sqlite3.Connection, activation: str) -> bool:
        row = conn.execute(
            "SELECT 1 FROM journal WHERE activation_id = ? AND kind IN ('WOKEN', 'WAKE_FAILED')",
            (activation,),
        ).fetchone()
        return row is not None

    @staticmethod
    def insert_origin(
        conn: sqlite3.Connection,
        origin_id: str,
        activation_id: str,
        task_id: str,
        relation: str,
        locator_json: str,
        now_ms: int,
    ) -> None:
        conn.execute(
            "INSERT OR IGNORE INTO origins (origin_id, activation_id, task_id, relation,"
            " locator_json, recorded_at_ms) VALUES (?, ?, ?, ?, ?, ?)",
            (origin_id, activation_id, task_id, relation, locator_json, now_ms),
        )

    @staticmethod
    def owns_context(conn: sqlite3.Connection, scope: Scope, context_id: str) -> bool:
        owned = conn.execute(
            "SELECT 1 FROM contexts WHERE tenant = ? AND principal = ? AND context_id = ? LIMIT 1",
            (scope.tenant, scope.principal, context_id),
        ).fetchone()
        return bool(owned)

    @staticmethod
    def touch_context(
        conn: sqlite3.Connection,
        scope: Scope,
        source: str,
        key: str,
        context_id: str,
        now_ms: int,
    ) -> None:
        conn.execute(
            _UPSERT_CONTEXT, (scope.tenant, scope.principal, source, key, context_id, now_ms)
        )

    @staticmethod
    def upsert_conversation(
        conn: sqlite3.Connection,
        scope: Scope,
        source: str,
        key: str,
        context_id: str,
        now_ms: int,
    ) -> str:
        conn.execute(
            _UPSERT_CONTEXT, (scope.tenant, scope.principal, source, key, context_id, now_ms)
        )
        row = conn.execute(
            "SELECT context_id FROM contexts WHERE tenant = ? AND principal = ? AND source = ?"
            " AND conversation_key = ?",
            (scope.tenant, scope.principal, source, key),
        ).fetchone()
        return str(row[0])


_REC = _Recorder()


def find_duplicate(conn: sqlite3.Connection, act: Activation) -> Accepted | None:
    """See :func:`taskplane.store.acceptance.find_duplicate`."""
    return decide.find_duplicate(_REC, conn, act)


def accept(conn: sqlite3.Connection, act: Activation, locator: Locator, now_ms: int) -> Accepted:
    """See :func:`taskplane.store.acceptance.accept`."""
    return decide.accept(_REC, conn, act, locator, now_ms)


def anchor_target(conn: sqlite3.Connection, act: Activation) -> str | None:
    """See :func:`taskplane.store.acceptance.anchor_target`."""
    return decide.anchor_target(_REC, conn, act)


def record_direct(
    conn: sqlite3.Connection, act: Activation, reply: Message, now_ms: int
) -> Accepted:
    """See :func:`taskplane.store.acceptance.record_direct`."""
    return decide.record_direct(_REC, conn, act, reply, now_ms)
