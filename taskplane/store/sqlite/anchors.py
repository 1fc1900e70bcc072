"""Reply anchors: ``(principal, source, providerResponseId) -> taskId`` (design rule
"A provider reply continues a Task only through ...").

Blocking functions of a ``sqlite3.Connection``, called only inside store ops.
"""

from __future__ import annotations

import sqlite3

from taskplane.scope import Scope


def record(
    conn: sqlite3.Connection,
    scope: Scope,
    source: str,
    provider_response_id: str,
    task_id: str,
    now_ms: int,
) -> None:
    """Store the anchor of a provider response Channels sent for ``task_id``."""
    conn.execute(
        "INSERT OR REPLACE INTO reply_anchors (tenant, principal, source,"
        " provider_response_id, task_id, created_at_ms) VALUES (?, ?, ?, ?, ?, ?)",
        (scope.tenant, scope.principal, source, provider_response_id, task_id, now_ms),
    )


def lookup(
    conn: sqlite3.Connection, scope: Scope, source: str, provider_response_id: str
) -> str | None:
    """The Task anchored at ``provider_response_id`` for this principal, or ``None``.

    The key includes the principal: an anchor never matches another principal's event
    (condition 5 of a verified reply anchor).
    """
    row = conn.execute(
        "SELECT task_id FROM reply_anchors WHERE tenant = ? AND principal = ? AND source = ?"
        " AND provider_response_id = ?",
        (scope.tenant, scope.principal, source, provider_response_id),
    ).fetchone()
    return str(row[0]) if row else None
