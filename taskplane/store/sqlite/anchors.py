"""Reply anchors on SQLite (:mod:`taskplane.store.anchors` holds the rule and the
statements).

Blocking functions of a ``sqlite3.Connection``, called only inside store ops.
"""

from __future__ import annotations

import sqlite3

from taskplane.scope import Scope
from taskplane.store import anchors as shared


def record(
    conn: sqlite3.Connection,
    scope: Scope,
    source: str,
    provider_response_id: str,
    task_id: str,
    now_ms: int,
) -> None:
    """Store the anchor of a provider response for ``task_id`` (see
    :mod:`taskplane.store.anchors`)."""
    conn.execute(
        shared.RECORD, shared.record_params(scope, source, provider_response_id, task_id, now_ms)
    )


def lookup(
    conn: sqlite3.Connection, scope: Scope, source: str, provider_response_id: str
) -> str | None:
    """The Task anchored at ``provider_response_id`` for this principal, or ``None``
    (see :mod:`taskplane.store.anchors`)."""
    row = conn.execute(
        shared.LOOKUP, shared.lookup_params(scope, source, provider_response_id)
    ).fetchone()
    return str(row[0]) if row else None
