"""PostgreSQL's half of startup compaction (:mod:`taskplane.store.retention` holds
the rules and the portable statements): the journal deletes, in PostgreSQL's SQL,
and the tables only PostgreSQL has (agent sessions, pruned with their Task).

Blocking functions of a psycopg connection, called only inside store ops.
"""

from __future__ import annotations

from taskplane.store import retention
from taskplane.store.postgres import events, sessions, wakes
from taskplane.store.postgres.qmark import to_format
from taskplane.store.postgres.schema import Connection
from taskplane.store.records import CompactionReport

_JOURNAL = (
    # Every record of an accepted (or quarantined) claim whose Task is gone, or of an
    # old Task-less claim (direct replies, quarantines).
    """
    DELETE FROM journal WHERE activation_id IN (
        SELECT c.activation_id FROM journal c
        WHERE c.kind = 'CLAIM'
          AND (CASE WHEN c.task_id IS NULL THEN c.recorded_at_ms < ?
                    ELSE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.task_id = c.task_id)
               END)
          AND EXISTS (SELECT 1 FROM journal d WHERE d.activation_id = c.activation_id
                      AND d.kind IN ('ACCEPTED', 'QUARANTINED'))
    )
    """,
    # Old records of activations without a claim.
    "DELETE FROM journal WHERE activation_id IN (SELECT activation_id FROM journal"
    " GROUP BY activation_id HAVING NOT bool_or(kind = 'CLAIM'))"
    " AND kind != 'CLAIM' AND recorded_at_ms < ?",
)


def compact(conn: Connection, now_ms: int) -> CompactionReport:
    """See :func:`taskplane.store.retention.compact`; then the Task version records
    of pruned Tasks and those past their short window (:func:`events.prune`)."""

    def run(sql: str, args: tuple[object, ...]) -> int:
        return conn.execute(to_format(sql), args).rowcount

    report = retention.compact(run, _JOURNAL, now_ms)
    events.prune(conn, now_ms)
    wakes.forget_pruned(conn)  # the wake rows of the Tasks just pruned
    # --- agent sessions: retained with their Task (after the Task deletes above) ---
    sessions.prune(conn)
    return report
