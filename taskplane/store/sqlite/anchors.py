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
    """Store the anchor of a provider response for ``task_id`` (condition 3). It may be
    recorded before the response is sent, so that no reply can arrive before it; it
    counts only once that response was delivered (see :func:`lookup`)."""
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
    (condition 5 of a verified reply anchor). An anchor counts only once an outbound
    delivery of its Task, from its source, reached ``delivered`` with exactly that
    provider response ID (condition 2: "Channels sent a provider response for that
    Task"); an anchor whose response is still being sent, failed or is ambiguous
    continues nothing.
    """
    row = conn.execute(
        "SELECT a.task_id FROM reply_anchors AS a"
        " WHERE a.tenant = ? AND a.principal = ? AND a.source = ? AND a.provider_response_id = ?"
        " AND EXISTS (SELECT 1 FROM deliveries AS d WHERE d.task_id = a.task_id"
        " AND d.source = a.source AND d.state = 'delivered'"
        " AND d.provider_response_id = a.provider_response_id)",
        (scope.tenant, scope.principal, source, provider_response_id),
    ).fetchone()
    return str(row[0]) if row else None
