"""Reply anchors: ``(principal, source, providerResponseId) -> taskId`` (design rule
"A reply anchor must be verified, and a failed anchor is a new Task").

Blocking functions of a psycopg connection, called only inside store ops.
"""

from __future__ import annotations

from taskplane.scope import Scope
from taskplane.store.postgres.schema import Connection


def record(
    conn: Connection,
    scope: Scope,
    source: str,
    provider_response_id: str,
    task_id: str,
    now_ms: int,
) -> None:
    """Store the anchor of a provider response sent for ``task_id`` (replacing one)."""
    conn.execute(
        "INSERT INTO reply_anchors (tenant, principal, source, provider_response_id,"
        " task_id, created_at_ms) VALUES (%s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (tenant, principal, source, provider_response_id)"
        " DO UPDATE SET task_id = excluded.task_id, created_at_ms = excluded.created_at_ms",
        (scope.tenant, scope.principal, source, provider_response_id, task_id, now_ms),
    )


def lookup(conn: Connection, scope: Scope, source: str, provider_response_id: str) -> str | None:
    """The Task anchored at ``provider_response_id`` for this principal, or ``None``.

    The key includes the principal: an anchor never matches another principal's event.
    """
    row = conn.execute(
        "SELECT task_id FROM reply_anchors WHERE tenant = %s AND principal = %s"
        " AND source = %s AND provider_response_id = %s",
        (scope.tenant, scope.principal, source, provider_response_id),
    ).fetchone()
    return str(row[0]) if row else None
