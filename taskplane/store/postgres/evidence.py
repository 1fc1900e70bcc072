"""Evidence records: ``task.activation`` and ``activation.unhealthy`` (design rule
"Evidence record types").

Blocking functions of a psycopg connection, called only inside store ops.
"""

from __future__ import annotations

import json

from taskplane.store.postgres.schema import Connection
from taskplane.store.records import EvidenceEntry, EvidenceRecord
from taskplane.store.rows import evidence_json

INSERT = (
    "INSERT INTO evidence (record_type, activation_id, task_id, record_json,"
    " recorded_at_ms) VALUES (%s, %s, %s, %s, %s)"
)


def append(conn: Connection, record: EvidenceRecord, now_ms: int) -> None:
    """Append ``record``; ``recordType`` and ``recordedAt`` join its fields."""
    conn.execute(
        INSERT,
        (
            record.record_type,
            record.activation_id,
            record.task_id,
            evidence_json(record, now_ms),
            now_ms,
        ),
    )


def entries(
    conn: Connection, record_type: str | None, task_id: str | None
) -> tuple[EvidenceEntry, ...]:
    """Evidence records, oldest first, optionally of one type and/or one Task."""
    rows = conn.execute(
        "SELECT record_type, activation_id, task_id, record_json, recorded_at_ms FROM evidence"
        " WHERE (%(type)s::text IS NULL OR record_type = %(type)s)"
        " AND (%(task)s::text IS NULL OR task_id = %(task)s) ORDER BY seq",
        {"type": record_type, "task": task_id},
    ).fetchall()
    return tuple(
        EvidenceEntry(kind, act, task, json.loads(fields), at)
        for kind, act, task, fields, at in rows
    )
