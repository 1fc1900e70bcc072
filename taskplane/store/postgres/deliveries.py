"""Outbound delivery records on PostgreSQL (:mod:`taskplane.store.deliveries` holds
the statements).

Blocking functions of a psycopg connection, called only inside store ops.
"""

from __future__ import annotations

from taskplane.store import deliveries as shared
from taskplane.store.postgres.qmark import to_format
from taskplane.store.postgres.schema import Connection
from taskplane.store.records import Delivery, DeliveryRecord, DeliveryState

_LOAD = to_format(shared.LOAD)
_SAVE = to_format(shared.SAVE)


def load(conn: Connection, delivery_id: str) -> DeliveryRecord | None:
    """The record of ``delivery_id``, or ``None``."""
    row = conn.execute(_LOAD, (delivery_id,)).fetchone()
    return DeliveryRecord(*row) if row else None


def save(
    conn: Connection,
    delivery: Delivery,
    state: DeliveryState,
    now_ms: int,
    *,
    response_id: str | None = None,
    error: str | None = None,
) -> None:
    """Insert or move ``delivery`` to ``state``."""
    conn.execute(_SAVE, shared.save_params(delivery, state, now_ms, response_id, error))
