"""Startup compaction: the 30-day retention window and what a live Task keeps, once
for every backend.

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

The statements are portable SQL with ``?`` parameters. The journal's are the
backend's own (each engine finds orphaned claims on its own indexes); each takes the
cutoff as its one parameter.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from taskplane.store.records import RETENTION_MS, CompactionReport

TERMINAL_STATES = (
    "'TASK_STATE_COMPLETED', 'TASK_STATE_FAILED', 'TASK_STATE_CANCELED', 'TASK_STATE_REJECTED'"
)
"""The terminal Task states, as an SQL list of literals."""

Run = Callable[[str, tuple[object, ...]], int]
"""Execute one ``?``-parameter statement with its arguments; the rows it deleted."""


def compact(run: Run, journal_statements: Sequence[str], now_ms: int) -> CompactionReport:
    """Delete what the retention rules no longer keep; return what was removed.

    Args:
        run: the backend's statement runner (in the store op's transaction).
        journal_statements: the backend's journal deletes, in order, each with the
            cutoff (ms since the epoch) as its one parameter.
        now_ms: the store clock, ms since the epoch (tests pass a moved clock).
    """
    cutoff = now_ms - RETENTION_MS
    tasks = run(
        f"DELETE FROM tasks WHERE state IN ({TERMINAL_STATES}) AND updated_at_ms < ?", (cutoff,)
    )
    journal = sum(run(sql, (cutoff,)) for sql in journal_statements)
    contexts = run(
        "DELETE FROM contexts WHERE last_active_at_ms < ? AND NOT EXISTS"
        " (SELECT 1 FROM tasks t WHERE t.tenant = contexts.tenant"
        " AND t.principal = contexts.principal AND t.context_id = contexts.context_id)",
        (cutoff,),
    )
    evidence = run(
        "DELETE FROM evidence WHERE recorded_at_ms < ? AND (task_id IS NULL OR NOT EXISTS"
        " (SELECT 1 FROM tasks t WHERE t.task_id = evidence.task_id))",
        (cutoff,),
    )
    origins = run(
        "DELETE FROM origins WHERE NOT EXISTS"
        " (SELECT 1 FROM tasks t WHERE t.task_id = origins.task_id)",
        (),
    )
    anchors = run(
        "DELETE FROM reply_anchors WHERE created_at_ms < ? AND NOT EXISTS"
        " (SELECT 1 FROM tasks t WHERE t.task_id = reply_anchors.task_id)",
        (cutoff,),
    )
    deliveries = run(
        "DELETE FROM deliveries WHERE state != 'sending'"
        " AND (payload_policy IS NULL OR payload_policy != 'fixed')"
        " AND updated_at_ms < ? AND NOT EXISTS"
        " (SELECT 1 FROM tasks t WHERE t.task_id = deliveries.task_id)",
        (cutoff,),
    )
    return CompactionReport(tasks, journal, contexts, evidence, origins, anchors, deliveries)
