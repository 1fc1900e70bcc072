"""Records written beside a change, and the Task compare-and-swap, in one statement.

Journal and evidence records go in as multi-row inserts over arrays (``unnest ...
WITH ORDINALITY``, so their ``seq`` follows the given order), chained to the Task's
compare-and-swap ``UPDATE`` in one data-modifying statement: one round trip per
``apply`` whatever it carries, and the records are written only if the swap
succeeded.

Blocking functions of a psycopg connection, called only inside store ops.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from taskplane.store.postgres import tasks
from taskplane.store.postgres.journal import record_json
from taskplane.store.postgres.schema import Connection
from taskplane.store.records import EvidenceRecord, JournalRecord, Record, StoredTask, TaskChange

_INSERT_RECORDS = """
j AS (
    INSERT INTO journal (kind, activation_id, task_id, record_json, recorded_at_ms)
    SELECT x.k, x.a, x.t, x.r, %(now)s
    FROM {source} unnest(%(jk)s::text[], %(ja)s::text[], %(jt)s::text[], %(jr)s::text[])
         WITH ORDINALITY AS x(k, a, t, r, n)
    ORDER BY x.n
), e AS (
    INSERT INTO evidence (record_type, activation_id, task_id, record_json, recorded_at_ms)
    SELECT x.k, x.a, x.t, x.r, %(now)s
    FROM {source} unnest(%(ek)s::text[], %(ea)s::text[], %(et)s::text[], %(er)s::text[])
         WITH ORDINALITY AS x(k, a, t, r, n)
    ORDER BY x.n
)
"""

_APPEND = "WITH " + _INSERT_RECORDS.format(source="") + "SELECT 1"

_APPLY = (
    "WITH u AS (UPDATE tasks SET state = %(state)s, status_ts = %(ts)s, task_json = %(json)s,"
    " version = version + 1, updated_at_ms = %(now)s"
    " WHERE task_id = %(id)s AND version = %(version)s RETURNING 1), "
    + _INSERT_RECORDS.format(source="u,")
    + "SELECT count(*) FROM u"
)


def record_params(records: Sequence[Record], now_ms: int) -> dict[str, object]:
    """The array parameters of the record inserts (journal ``j*``, evidence ``e*``)."""
    journal = [r for r in records if isinstance(r, JournalRecord)]
    evidence = [r for r in records if isinstance(r, EvidenceRecord)]
    return {
        "now": now_ms,
        "jk": [r.kind for r in journal],
        "ja": [r.activation_id for r in journal],
        "jt": [r.task_id for r in journal],
        "jr": [record_json(r.kind, r.activation_id, r.fields) for r in journal],
        "ek": [r.record_type for r in evidence],
        "ea": [r.activation_id for r in evidence],
        "et": [r.task_id for r in evidence],
        "er": [evidence_json(r, now_ms) for r in evidence],
    }


def evidence_json(record: EvidenceRecord, now_ms: int) -> str:
    """The stored JSON of one evidence record (``recordType``, ``recordedAt`` added)."""
    fields = {"recordType": record.record_type, **record.fields, "recordedAt": now_ms}
    return json.dumps(fields, sort_keys=True)


def append(conn: Connection, records: Sequence[Record], now_ms: int) -> None:
    """Append journal and evidence ``records``, in order, in one statement."""
    if records:
        conn.execute(_APPEND, record_params(records, now_ms))


def apply(conn: Connection, change: TaskChange) -> StoredTask:
    """Store ``change.after`` if the Task's version is still ``change.before``'s, with
    ``change.records``, in one statement.

    Raises:
        Internal: the version moved since ``change.before`` (or the Task is gone).
    """
    before, after, now_ms = change.before, change.after, change.now_ms
    if not change.records:
        return tasks.update(conn, before, after, now_ms)
    state, ts, task_json, _, task_id, version = tasks.update_params(before, after, now_ms)
    params = record_params(change.records, now_ms)
    params.update(state=state, ts=ts, json=task_json, id=task_id, version=version)
    row = conn.execute(_APPLY, params).fetchone()
    if not row or row[0] != 1:
        raise tasks.concurrent_write(after, before)
    return tasks.moved(before, after, now_ms)
