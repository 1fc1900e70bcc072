"""Reply anchors on PostgreSQL (:mod:`taskplane.store.anchors` holds the rule and the
statements).

Blocking functions of a psycopg connection, called only inside store ops.
"""

from __future__ import annotations

from taskplane.scope import Scope
from taskplane.store import anchors as shared
from taskplane.store.postgres.qmark import to_format
from taskplane.store.postgres.schema import Connection

_RECORD = to_format(shared.RECORD)
_LOOKUP = to_format(shared.LOOKUP)


def record(
    conn: Connection,
    scope: Scope,
    source: str,
    provider_response_id: str,
    task_id: str,
    now_ms: int,
) -> None:
    """Store the anchor of a provider response for ``task_id`` (see
    :mod:`taskplane.store.anchors`)."""
    conn.execute(
        _RECORD, shared.record_params(scope, source, provider_response_id, task_id, now_ms)
    )


def lookup(conn: Connection, scope: Scope, source: str, provider_response_id: str) -> str | None:
    """The Task anchored at ``provider_response_id`` for this principal, or ``None``
    (see :mod:`taskplane.store.anchors`)."""
    row = conn.execute(
        _LOOKUP, shared.lookup_params(scope, source, provider_response_id)
    ).fetchone()
    return str(row[0]) if row else None
