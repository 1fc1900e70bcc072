"""Startup compaction: the 30-day retention window and what a live Task keeps.

Design rules "Operational records are compacted at startup" and the idempotency
"Retention" text. Run once at startup, before wakes are replayed, as one store op
(one transaction).

Kept:

- a Task that is not terminal, or terminal and updated within the window;
- every journal record of an activation that is pending (claimed, neither ACCEPTED
  nor QUARANTINED), whose Task is kept, or (direct replies and quarantines, which
  have no Task) recorded within the window. A pruned claim frees its identity: the
  same messageId is then accepted as new work;
- a context mapping active within the window, or whose contextId a kept Task uses;
- evidence recorded within the window, or about a kept Task;
- origins and reply anchors of kept Tasks (anchors also within the window);
- an outbound delivery still ``sending`` (never pruned), with a ``fixed`` payload
  policy, of a kept Task, or updated within the window.
"""

from __future__ import annotations

import sqlite3

from taskplane.store.records import RETENTION_MS, CompactionReport

_TERMINAL = (
    "'TASK_STATE_COMPLETED', 'TASK_STATE_FAILED', 'TASK_STATE_CANCELED', 'TASK_STATE_REJECTED'"
)


def compact(conn: sqlite3.Connection, now_ms: int) -> CompactionReport:
    """Delete what the retention rules no longer keep; return what was removed.

    Args:
        now_ms: the store clock, ms since the epoch (tests pass a moved clock).
    """
    cutoff = now_ms - RETENTION_MS

    def run(sql: str, *args: object) -> int:
        return conn.execute(sql, args).rowcount

    tasks = run(f"DELETE FROM tasks WHERE state IN ({_TERMINAL}) AND updated_at_ms < ?", cutoff)
    # Claims whose Task is gone are found from the Task IDs the journal names (its
    # task index, checked against the tasks), and Task-less claims (direct replies,
    # quarantines) by their index entry: no pass over every journal row. Same records
    # as "each accepted claim whose Task is missing, or Task-less and old".
    journal = run(
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
        cutoff,
    )
    # Records of activations without a claim, found on the activation index (covering).
    journal += run(
        "DELETE FROM journal WHERE activation_id IN (SELECT activation_id FROM journal"
        " GROUP BY activation_id HAVING max(kind = 'CLAIM') = 0)"
        " AND kind != 'CLAIM' AND recorded_at_ms < ?",
        cutoff,
    )
    contexts = run(
        "DELETE FROM contexts WHERE last_active_at_ms < ? AND NOT EXISTS"
        " (SELECT 1 FROM tasks t WHERE t.tenant = contexts.tenant"
        " AND t.principal = contexts.principal AND t.context_id = contexts.context_id)",
        cutoff,
    )
    evidence = run(
        "DELETE FROM evidence WHERE recorded_at_ms < ? AND (task_id IS NULL OR NOT EXISTS"
        " (SELECT 1 FROM tasks t WHERE t.task_id = evidence.task_id))",
        cutoff,
    )
    origins = run(
        "DELETE FROM origins WHERE NOT EXISTS"
        " (SELECT 1 FROM tasks t WHERE t.task_id = origins.task_id)"
    )
    anchors = run(
        "DELETE FROM reply_anchors WHERE created_at_ms < ? AND NOT EXISTS"
        " (SELECT 1 FROM tasks t WHERE t.task_id = reply_anchors.task_id)",
        cutoff,
    )
    deliveries = run(
        "DELETE FROM deliveries WHERE state != 'sending'"
        " AND (payload_policy IS NULL OR payload_policy != 'fixed')"
        " AND updated_at_ms < ? AND NOT EXISTS"
        " (SELECT 1 FROM tasks t WHERE t.task_id = deliveries.task_id)",
        cutoff,
    )
    return CompactionReport(tasks, journal, contexts, evidence, origins, anchors, deliveries)
