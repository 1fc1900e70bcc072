"""The PostgreSQL implementation of :class:`~taskplane.store.source_store.SourceStore`
(tables ``source_checkpoints``, ``tasks`` and ``deliveries``)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import trio

from taskplane.store import deliveries
from taskplane.store.postgres import leases
from taskplane.store.postgres.qmark import to_format
from taskplane.store.postgres.schema import Connection
from taskplane.store.records import StoredTask
from taskplane.store.requests import StoreRequest
from taskplane.store.source_facade import SourceStoreFacade
from taskplane.store.source_store import RESULT_STATES, DeliveryRow, LeaseFence
from taskplane.store.task_rows import COLUMNS, from_row

RESULT_LIMIT = 256

_RESOLVE = to_format(deliveries.RESOLVE)


def load_checkpoint(conn: Connection, principal: str, source: str) -> object:
    """The decoded checkpoint of ``source`` for ``principal``, or ``None``."""
    row = conn.execute(
        "SELECT value_json FROM source_checkpoints WHERE principal = %s AND source = %s",
        (principal, source),
    ).fetchone()
    return json.loads(row[0]) if row else None


def save_checkpoint(
    conn: Connection, principal: str, source: str, data: str, fence: LeaseFence | None
) -> None:
    """Replace the checkpoint of ``source`` for ``principal`` with ``data`` (JSON text),
    with ``fence`` only while that lease is current (checked first, same transaction).

    Raises:
        Fenced: the lease moved or expired; nothing is written.
    """
    if fence is not None:
        leases.check_fence(conn, fence)
    conn.execute(
        "INSERT INTO source_checkpoints (principal, source, value_json) VALUES (%s, %s, %s)"
        " ON CONFLICT (principal, source) DO UPDATE SET value_json = excluded.value_json",
        (principal, source, data),
    )


def results_to_deliver(
    conn: Connection, sources: Sequence[str], reply_prefix: str, since_ms: int
) -> tuple[StoredTask, ...]:
    """See :meth:`SourceStore.results_to_deliver` (the reply's operation id is read
    from the Task's JSON: its status message id, else its state)."""
    if not sources:
        return ()
    columns = ", ".join(f"t.{c}" for c in COLUMNS)
    rows = conn.execute(
        f"SELECT {columns} FROM tasks t WHERE t.source = ANY(%s) AND t.state = ANY(%s)"
        " AND t.updated_at_ms >= %s AND NOT EXISTS (SELECT 1 FROM deliveries d"
        " WHERE d.task_id = t.task_id AND d.state IN ('delivered', 'ambiguous')"
        " AND d.operation_id = %s || COALESCE("
        " t.task_json::jsonb #>> '{status,message,messageId}',"
        " t.task_json::jsonb #>> '{status,state}'))"
        " ORDER BY t.updated_at_ms, t.task_id LIMIT %s",
        (list(sources), list(RESULT_STATES), since_ms, reply_prefix, RESULT_LIMIT),
    ).fetchall()
    return tuple(from_row(row) for row in rows)


def list_deliveries(conn: Connection, state: str | None) -> tuple[DeliveryRow, ...]:
    """Every delivery (or those in ``state``), newest change first."""
    rows = conn.execute(
        "SELECT delivery_id, task_id, source, operation_id, recovery, state,"
        " provider_response_id, error, updated_at_ms FROM deliveries"
        " WHERE (%(state)s::text IS NULL OR state = %(state)s)"
        " ORDER BY updated_at_ms DESC, delivery_id",
        {"state": state},
    ).fetchall()
    return tuple(DeliveryRow(*row) for row in rows)


def resolve_delivery(
    conn: Connection, delivery_id: str, now_ms: int, delivered_as: str | None
) -> DeliveryRow:
    """Resolve an ``ambiguous`` delivery by hand (see :meth:`SourceStore.resolve_delivery`).

    Raises:
        InvalidRequest: no such delivery, or it is not ``ambiguous``.
    """
    row = conn.execute(
        "SELECT state FROM deliveries WHERE delivery_id = %s FOR UPDATE", (delivery_id,)
    ).fetchone()
    state, error = deliveries.resolution(delivery_id, row[0] if row else None, delivered_as)
    updated = conn.execute(
        _RESOLVE + " RETURNING delivery_id, task_id, source, operation_id, recovery, state,"
        " provider_response_id, error, updated_at_ms",
        (state, delivered_as, error, now_ms, delivery_id),
    ).fetchone()
    assert updated is not None
    return DeliveryRow(*updated)


class _Recorder:
    """The :class:`~taskplane.store.source_facade.SourceRecorder` of this backend."""

    load_checkpoint = staticmethod(load_checkpoint)
    save_checkpoint = staticmethod(save_checkpoint)
    results_to_deliver = staticmethod(results_to_deliver)
    list_deliveries = staticmethod(list_deliveries)
    resolve_delivery = staticmethod(resolve_delivery)


class PgSourceStore(SourceStoreFacade[Connection]):
    """The source store over the store actor's inbox (shared with the task store)."""

    def __init__(self, inbox: trio.MemorySendChannel[StoreRequest]) -> None:
        super().__init__(inbox, _Recorder())
