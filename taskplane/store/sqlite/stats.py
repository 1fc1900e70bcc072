"""Counts for health and metrics (:meth:`TaskStore.counts`) in SQL.

Read-only; one small query per figure, each served by an index or a table scan of
the live (compacted) store.
"""

from __future__ import annotations

import sqlite3

from taskplane.store.records import StoreCounts

UNHEALTHY_RECORD_SUFFIX = ".unhealthy"
"""Evidence whose ``record_type`` ends with this marks a plane that is not healthy."""


def store_counts(conn: sqlite3.Connection, since_ms: int) -> StoreCounts:
    """Count Tasks and deliveries by state, and unhealthy evidence after ``since_ms``."""
    tasks = dict(conn.execute("SELECT state, COUNT(*) FROM tasks GROUP BY state").fetchall())
    deliveries = dict(
        conn.execute("SELECT state, COUNT(*) FROM deliveries GROUP BY state").fetchall()
    )
    (unhealthy,) = conn.execute(
        "SELECT COUNT(*) FROM evidence WHERE record_type LIKE ? AND recorded_at_ms > ?",
        ("%" + UNHEALTHY_RECORD_SUFFIX, since_ms),
    ).fetchone()
    return StoreCounts(tasks, deliveries, int(unhealthy))
