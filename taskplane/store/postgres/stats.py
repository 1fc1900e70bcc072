"""Counts for health and metrics (:meth:`TaskStore.counts`) in SQL (read only)."""

from __future__ import annotations

from taskplane.store.postgres.schema import Connection
from taskplane.store.records import StoreCounts

UNHEALTHY_RECORD_SUFFIX = ".unhealthy"
"""Evidence whose ``record_type`` ends with this marks a plane that is not healthy."""


def store_counts(conn: Connection, since_ms: int) -> StoreCounts:
    """Count Tasks and deliveries by state, and unhealthy evidence after ``since_ms``."""
    tasks: dict[str, int] = dict(
        conn.execute("SELECT state, count(*) FROM tasks GROUP BY state").fetchall()
    )
    deliveries: dict[str, int] = dict(
        conn.execute("SELECT state, count(*) FROM deliveries GROUP BY state").fetchall()
    )
    row = conn.execute(
        "SELECT count(*) FROM evidence WHERE record_type LIKE %s AND recorded_at_ms > %s",
        ("%" + UNHEALTHY_RECORD_SUFFIX, since_ms),
    ).fetchone()
    return StoreCounts(tasks, deliveries, int(row[0]) if row else 0)
