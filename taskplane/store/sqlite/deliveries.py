"""Outbound delivery records on SQLite (:mod:`taskplane.store.deliveries` holds the
statements).

Blocking functions of a ``sqlite3.Connection``, called only inside store ops.
"""

from __future__ import annotations

import sqlite3

from taskplane.store import deliveries as shared
from taskplane.store.records import Delivery, DeliveryRecord, DeliveryState


def load(conn: sqlite3.Connection, delivery_id: str) -> DeliveryRecord | None:
    """The record of ``delivery_id``, or ``None``."""
    row = conn.execute(shared.LOAD, (delivery_id,)).fetchone()
    return DeliveryRecord(*row) if row else None


def save(
    conn: sqlite3.Connection,
    delivery: Delivery,
    state: DeliveryState,
    now_ms: int,
    *,
    response_id: str | None = None,
    error: str | None = None,
) -> None:
    """Insert or move ``delivery`` to ``state``."""
    conn.execute(shared.SAVE, shared.save_params(delivery, state, now_ms, response_id, error))
