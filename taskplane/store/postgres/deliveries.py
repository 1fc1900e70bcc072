"""Outbound delivery records: ``prepared -> sending -> delivered | failed | ambiguous``.

Blocking functions of a psycopg connection, called only inside store ops.
"""

from __future__ import annotations

from taskplane.store.postgres.schema import Connection
from taskplane.store.records import Delivery, DeliveryRecord, DeliveryState


def load(conn: Connection, delivery_id: str) -> DeliveryRecord | None:
    """The record of ``delivery_id``, or ``None``."""
    row = conn.execute(
        "SELECT delivery_id, payload_digest, state, provider_response_id, error"
        " FROM deliveries WHERE delivery_id = %s",
        (delivery_id,),
    ).fetchone()
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
    conn.execute(
        "INSERT INTO deliveries (delivery_id, task_id, source, operation_id, payload_digest,"
        " recovery, payload_policy, state, provider_response_id, error, updated_at_ms)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (delivery_id) DO UPDATE SET state = excluded.state,"
        " provider_response_id = excluded.provider_response_id, error = excluded.error,"
        " updated_at_ms = excluded.updated_at_ms",
        (
            delivery.delivery_id,
            delivery.task_id,
            delivery.source,
            delivery.operation_id,
            delivery.payload_digest,
            delivery.recovery,
            delivery.payload_policy,
            state,
            response_id,
            error,
            now_ms,
        ),
    )
