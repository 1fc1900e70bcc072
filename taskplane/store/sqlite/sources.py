"""The SQLite implementation of :class:`~taskplane.store.source_store.SourceStore`
(tables ``source_checkpoints``, ``tasks`` and ``deliveries``)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

import trio

from taskplane.store import deliveries
from taskplane.store.records import StoredTask
from taskplane.store.requests import StoreRequest
from taskplane.store.source_facade import SourceStoreFacade
from taskplane.store.source_store import RESULT_STATES, DeliveryRow, LeaseFence
from taskplane.store.task_rows import COLUMNS, from_row

RESULT_LIMIT = 256


def load_checkpoint(conn: sqlite3.Connection, principal: str, source: str) -> object:
    row = conn.execute(
        "SELECT value_json FROM source_checkpoints WHERE principal = ? AND source = ?",
        (principal, source),
    ).fetchone()
    return json.loads(row[0]) if row else None


def save_checkpoint(
    conn: sqlite3.Connection, principal: str, source: str, data: str, fence: LeaseFence | None
) -> None:
    # One process per SQLite store: no leases, so no fence is ever given.
    assert fence is None, "a SQLite store has no leader leases"
    conn.execute(
        "INSERT INTO source_checkpoints (principal, source, value_json) VALUES (?, ?, ?)"
        " ON CONFLICT (principal, source) DO UPDATE SET value_json = excluded.value_json",
        (principal, source, data),
    )


def results_to_deliver(
    conn: sqlite3.Connection, sources: Sequence[str], reply_prefix: str, since_ms: int
) -> tuple[StoredTask, ...]:
    if not sources:
        return ()
    marks = ", ".join("?" for _ in sources)
    states = ", ".join("?" for _ in RESULT_STATES)
    columns = ", ".join(f"t.{c}" for c in COLUMNS)
    rows = conn.execute(
        f"SELECT {columns} FROM tasks t WHERE t.source IN ({marks}) AND t.state IN ({states})"
        " AND t.updated_at_ms >= ? AND NOT EXISTS (SELECT 1 FROM deliveries d"
        " WHERE d.task_id = t.task_id AND d.state IN ('delivered', 'ambiguous')"
        " AND d.operation_id = ? || COALESCE("
        " json_extract(t.task_json, '$.status.message.messageId'),"
        " json_extract(t.task_json, '$.status.state')))"
        " ORDER BY t.updated_at_ms, t.task_id LIMIT ?",
        (*sources, *RESULT_STATES, since_ms, reply_prefix, RESULT_LIMIT),
    ).fetchall()
    return tuple(from_row(row) for row in rows)


def list_deliveries(conn: sqlite3.Connection, state: str | None) -> tuple[DeliveryRow, ...]:
    rows = conn.execute(
        "SELECT delivery_id, task_id, source, operation_id, recovery, state,"
        " provider_response_id, error, updated_at_ms FROM deliveries"
        " WHERE (? IS NULL OR state = ?) ORDER BY updated_at_ms DESC, delivery_id",
        (state, state),
    ).fetchall()
    return tuple(DeliveryRow(*row) for row in rows)


def resolve_delivery(
    conn: sqlite3.Connection, delivery_id: str, now_ms: int, delivered_as: str | None
) -> DeliveryRow:
    row = conn.execute(
        "SELECT state FROM deliveries WHERE delivery_id = ?", (delivery_id,)
    ).fetchone()
    state, error = deliveries.resolution(delivery_id, row[0] if row else None, delivered_as)
    conn.execute(deliveries.RESOLVE, (state, delivered_as, error, now_ms, delivery_id))
    return next(r for r in list_deliveries(conn, None) if r.delivery_id == delivery_id)


class _Recorder:
    """The :class:`~taskplane.store.source_facade.SourceRecorder` of this backend."""

    load_checkpoint = staticmethod(load_checkpoint)
    save_checkpoint = staticmethod(save_checkpoint)
    results_to_deliver = staticmethod(results_to_deliver)
    list_deliveries = staticmethod(list_deliveries)
    resolve_delivery = staticmethod(resolve_delivery)


class SqliteSourceStore(SourceStoreFacade[sqlite3.Connection]):
    """The source store over the store actor's inbox (shared with the task store)."""

    def __init__(self, inbox: trio.MemorySendChannel[StoreRequest]) -> None:
        super().__init__(inbox, _Recorder())
