"""PostgreSQL schema of the task-plane store and its versioned migrations.

The tables are :mod:`taskplane.store.schema`'s, in PostgreSQL's column types, in
one database (its default schema; give taskplane a database of its own). Timestamps
are ``BIGINT`` milliseconds since the Unix epoch, except ``tasks.status_ts`` (see
:mod:`taskplane.store.paging`). Columns that order pages (``status_ts``,
``task_id``) use the ``"C"`` collation, so their order is byte order whatever the
database's locale.

Migrations: ``MIGRATIONS[i]`` takes the database from version ``i`` to ``i + 1``.
:func:`migrate` runs under a session advisory lock (:data:`MIGRATION_LOCK`): the
first node to start applies the missing steps in one transaction, the others wait
on the lock and then find the schema current. A database whose ``schema_version``
is newer than this taskplane knows is refused with
:class:`~taskplane.errors.StoreVersionError`, as the SQLite store refuses one.
"""

from __future__ import annotations

from typing import Any

import psycopg

from taskplane.store import schema

MIGRATION_LOCK = 0x7461736B706C616E
"""The advisory-lock key the migrating node holds (``"taskplan"`` as a 64-bit int)."""

_V1 = (
    schema.v1(
        schema.ColumnTypes(
            integer="BIGINT",
            sequence="BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
            ordered=' COLLATE "C"',
        )
    )
    # Indexes of PostgreSQL's own plans (results to deliver, deletes by Task).
    + "CREATE INDEX tasks_by_source ON tasks (source, updated_at_ms);\n"
    + "CREATE INDEX deliveries_by_task ON deliveries (task_id);\n"
)

# --- agent sessions (the openai runtime's transcripts, shared by every node) ---
AGENT_SESSIONS = """
CREATE TABLE agent_sessions (
    task_id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    profile_json TEXT NOT NULL,
    messages_json TEXT NOT NULL,
    version BIGINT NOT NULL CHECK (version > 0),
    saved_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
"""
"""One row per Task session (:mod:`taskplane.store.postgres.sessions`)."""
# --- end agent sessions ---

MIGRATIONS: tuple[str, ...] = (_V1, AGENT_SESSIONS)
"""``MIGRATIONS[i]`` takes a database from version ``i`` to ``i + 1``."""

SCHEMA_VERSION = len(MIGRATIONS)

Connection = psycopg.Connection[tuple[Any, ...]]


def current_version(conn: Connection) -> int:
    """The ``schema_version`` recorded in the database (0 for an empty one)."""
    row = conn.execute("SELECT to_regclass('meta') IS NOT NULL").fetchone()
    if not row or not row[0]:
        return 0
    found = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return int(found[0]) if found else 0


def migrate(conn: Connection, *, where: str) -> int:
    """Bring the database to :data:`SCHEMA_VERSION`; return the version.

    Holds the advisory lock :data:`MIGRATION_LOCK` throughout, so concurrent nodes
    migrate once; the steps run in one transaction (all or nothing).

    Args:
        conn: an autocommit connection, outside any transaction.
        where: the database, for error messages (no password).
    Raises:
        StoreVersionError: the database was written by a newer taskplane.
        psycopg.Error: the migration failed; nothing was changed.
    """
    conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
    try:
        version = current_version(conn)
        schema.check_version(version, SCHEMA_VERSION, where)
        if version < SCHEMA_VERSION:
            with conn.transaction():
                for step in MIGRATIONS[version:]:
                    conn.execute(step.encode())
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema_version', %s)"
                    " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (str(SCHEMA_VERSION),),
                )
        return SCHEMA_VERSION
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))


def probe(conn: Connection, now_ms: int) -> None:
    """The write probe op: rewrite one ``meta`` row, so that its batch writes and must
    commit (see :meth:`~taskplane.store.contract.TaskStore.probe_commit`)."""
    conn.execute(
        "INSERT INTO meta (key, value) VALUES ('write_probe', %s)"
        " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (str(now_ms),),
    )
