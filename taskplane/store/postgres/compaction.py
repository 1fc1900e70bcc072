"""Compaction: the 30-day retention window and what a live Task keeps.

Design rule "Operational records are compacted at startup" and the idempotency
retention text; the same rules as the SQLite store's compaction, in PostgreSQL's
SQL (see :meth:`TaskStore.compact` for what is kept). One store op, so one
transaction.
"""

from __future__ import annotations

from taskplane.store.postgres.schema import Connection
from taskplane.store.records import RETENTION_MS, CompactionReport

_TERMINAL = (
    "'TASK_STATE_COMPLETED', 'TASK_STATE_FAILED', 'TASK_STATE_CANCELED', 'TASK_STATE_REJECTED'"
)


def compact(conn: Connection, now_ms: int) -> CompactionReport:
    """Delete what the retention rules no longer keep; return what was removed.

    Args:
        now_ms: the store clock, ms since the epoch (tests pass a moved clock).
    """
    cutoff = now_ms - RETENTION_MS

    def run(sql: str, *args: object) -> int:
        return conn.execute(sql, args).rowcount

    tasks = run(f"DELETE FROM tasks WHERE state IN ({_TERMINAL}) AND updated_at_ms < %s", cutoff)
    # Every record of an accepted (or quarantined) claim whose Task is gone, or of an
    # old Task-less claim (direct replies, quarantines).
    journal = run(
        """
        DELETE FROM journal WHERE activation_id IN (
            SELECT c.activation_id FROM journal c
            WHERE c.kind = 'CLAIM'
              AND (CASE WHEN c.task_id IS NULL THEN c.recorded_at_ms < %s
                        ELSE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.task_id = c.task_id)
                   END)
              AND EXISTS (SELECT 1 FROM journal d WHERE d.activation_id = c.activation_id
                          AND d.kind IN ('ACCEPTED', 'QUARANTINED'))
        )
        """,
        cutoff,
    )
    # Old records of activations without a claim.
    journal += run(
        "DELETE FROM journal WHERE activation_id IN (SELECT activation_id FROM journal"
        " GROUP BY activation_id HAVING NOT bool_or(kind = 'CLAIM'))"
        " AND kind != 'CLAIM' AND recorded_at_ms < %s",
        cutoff,
    )
    contexts = run(
        "DELETE FROM contexts WHERE last_active_at_ms < %s AND NOT EXISTS"
        " (SELECT 1 FROM tasks t WHERE t.tenant = contexts.tenant"
        " AND t.principal = contexts.principal AND t.context_id = contexts.context_id)",
        cutoff,
    )
    evidence = run(
        "DELETE FROM evidence WHERE recorded_at_ms < %s AND (task_id IS NULL OR NOT EXISTS"
        " (SELECT 1 FROM tasks t WHERE t.task_id = evidence.task_id))",
        cutoff,
    )
    origins = run(
        "DELETE FROM origins WHERE NOT EXISTS"
        " (SELECT 1 FROM tasks t WHERE t.task_id = origins.task_id)"
    )
    anchors = run(
        "DELETE FROM reply_anchors WHERE created_at_ms < %s AND NOT EXISTS"
        " (SELECT 1 FROM tasks t WHERE t.task_id = reply_anchors.task_id)",
        cutoff,
    )
    deliveries = run(
        "DELETE FROM deliveries WHERE state != 'sending'"
        " AND (payload_policy IS NULL OR payload_policy != 'fixed')"
        " AND updated_at_ms < %s AND NOT EXISTS"
        " (SELECT 1 FROM tasks t WHERE t.task_id = deliveries.task_id)",
        cutoff,
    )
    return CompactionReport(tasks, journal, contexts, evidence, origins, anchors, deliveries)
