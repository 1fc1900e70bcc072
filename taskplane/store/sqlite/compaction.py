"""SQLite's half of startup compaction (:mod:`taskplane.store.retention` holds the
rules and the portable statements): the journal deletes, on SQLite's indexes.

Blocking functions of a ``sqlite3.Connection``, called only inside store ops.
"""

from __future__ import annotations

import sqlite3

from taskplane.store import retention
from taskplane.store.records import CompactionReport

_JOURNAL = (
    # Claims whose Task is gone are found from the Task IDs the journal names (its
    # task index, checked against the tasks), and Task-less claims (direct replies,
    # quarantines) by their index entry: no pass over every journal row. Same records
    # as "each accepted claim whose Task is missing, or Task-less and old".
    """
    DELETE FROM journal WHERE activation_id IN (
        SELECT c.activation_id FROM journal c
        WHERE c.kind = 'CLAIM'
          AND c.task_id IN (
              SELECT DISTINCT g.task_id FROM journal g WHERE g.task_id IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.task_id = g.task_id))
          AND EXISTS (SELECT 1 FROM journal d WHERE d.activation_id = c.activation_id
                      AND d.kind IN ('ACCEPTED', 'QUARANTINED'))
        UNION ALL
        SELECT c.activation_id FROM journal c
        WHERE c.task_id IS NULL AND c.kind = 'CLAIM' AND c.recorded_at_ms < ?
          AND EXISTS (SELECT 1 FROM journal d WHERE d.activation_id = c.activation_id
                      AND d.kind IN ('ACCEPTED', 'QUARANTINED'))
    )
    """,
    # Records of activations without a claim, found on the activation index (covering).
    "DELETE FROM journal WHERE activation_id IN (SELECT activation_id FROM journal"
    " GROUP BY activation_id HAVING max(kind = 'CLAIM') = 0)"
    " AND kind != 'CLAIM' AND recorded_at_ms < ?",
)


def compact(conn: sqlite3.Connection, now_ms: int) -> CompactionReport:
    """See :func:`taskplane.store.retention.compact`."""
    return retention.compact(lambda sql, args: conn.execute(sql, args).rowcount, _JOURNAL, now_ms)
