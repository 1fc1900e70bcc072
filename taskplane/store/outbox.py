"""Native results waiting for delivery, and the operator's view of deliveries.

A native Task that completed, was rejected or asks for input (or authorization) has a
result to deliver to its source (design document, "Outbound delivery is serialized per
delivery ID").
The reply of one status is identified by ``<prefix><status message ID>`` (or
``<prefix><state>`` for a status without a message); a Task
whose reply delivery is ``delivered`` or ``ambiguous`` is not listed again.

Blocking functions of a ``sqlite3.Connection``, called only inside store ops.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import attrs

from taskplane.errors import InvalidRequest
from taskplane.store.tasks import _COLUMNS, StoredTask, _row

RESULT_STATES = (
    "TASK_STATE_COMPLETED",
    "TASK_STATE_REJECTED",
    "TASK_STATE_INPUT_REQUIRED",
    "TASK_STATE_AUTH_REQUIRED",
)


def results_to_deliver(
    conn: sqlite3.Connection,
    sources: Sequence[str],
    reply_prefix: str,
    updated_since_ms: int,
    limit: int = 256,
) -> list[StoredTask]:
    """Native Tasks of ``sources`` with an undelivered result, oldest change first.

    Only Tasks written at or after ``updated_since_ms`` (ms since the epoch) are read.
    """
    if not sources:
        return []
    marks = ", ".join("?" for _ in sources)
    states = ", ".join("?" for _ in RESULT_STATES)
    columns = ", ".join(f"t.{c.strip()}" for c in _COLUMNS.split(","))
    rows = conn.execute(
        f"SELECT {columns} FROM tasks t WHERE t.source IN ({marks}) AND t.state IN ({states})"
        " AND t.updated_at_ms >= ? AND NOT EXISTS (SELECT 1 FROM deliveries d"
        " WHERE d.task_id = t.task_id AND d.state IN ('delivered', 'ambiguous')"
        " AND d.operation_id = ? || COALESCE("
        " json_extract(t.task_json, '$.status.message.messageId'),"
        " json_extract(t.task_json, '$.status.state')))"
        " ORDER BY t.updated_at_ms, t.task_id LIMIT ?",
        (*sources, *RESULT_STATES, updated_since_ms, reply_prefix, limit),
    ).fetchall()
    return [_row(row) for row in rows]


@attrs.frozen
class DeliveryRow:
    """One delivery as the operator sees it (times in ms since the epoch)."""

    delivery_id: str
    task_id: str
    source: str
    operation_id: str
    recovery: str
    state: str
    provider_response_id: str | None
    error: str | None
    updated_at_ms: int


def list_deliveries(conn: sqlite3.Connection, state: str | None = None) -> list[DeliveryRow]:
    """Every delivery (or those in ``state``), newest change first."""
    where, args = ("WHERE state = ?", (state,)) if state else ("", ())
    rows = conn.execute(
        "SELECT delivery_id, task_id, source, operation_id, recovery, state,"
        f" provider_response_id, error, updated_at_ms FROM deliveries {where}"
        " ORDER BY updated_at_ms DESC, delivery_id",
        args,
    ).fetchall()
    return [DeliveryRow(*row) for row in rows]


def resolve(
    conn: sqlite3.Connection,
    delivery_id: str,
    now_ms: int,
    *,
    delivered_as: str | None,
) -> DeliveryRow:
    """Resolve an ``ambiguous`` delivery by hand.

    ``delivered_as`` (the provider's response ID the operator found) records it
    ``delivered``; ``None`` records it ``failed`` so it is sent again.

    Raises:
        InvalidRequest: no such delivery, or it is not ``ambiguous``.
    """
    row = conn.execute(
        "SELECT state FROM deliveries WHERE delivery_id = ?", (delivery_id,)
    ).fetchone()
    if row is None:
        raise InvalidRequest(f"delivery {delivery_id} does not exist")
    if row[0] != "ambiguous":
        raise InvalidRequest(f"delivery {delivery_id} is {row[0]}, not ambiguous")
    state = "delivered" if delivered_as is not None else "failed"
    error = None if delivered_as is not None else "resolved by the operator: send again"
    conn.execute(
        "UPDATE deliveries SET state = ?, provider_response_id = ?, error = ?,"
        " updated_at_ms = ? WHERE delivery_id = ?",
        (state, delivered_as, error, now_ms, delivery_id),
    )
    return next(r for r in list_deliveries(conn) if r.delivery_id == delivery_id)
