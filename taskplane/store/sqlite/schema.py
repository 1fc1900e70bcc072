"""SQLite schema of the task-plane store and its forward migrations.

The tables are :mod:`taskplane.store.schema`'s, in SQLite's column types, in one
database file (``taskplane.sqlite3``) in the store root. ``SCHEMA_VERSION`` is
stored in ``meta``; :func:`migrate` applies the missing steps of ``MIGRATIONS`` in
order inside one transaction, and refuses a database written by a newer taskplane
(:class:`~taskplane.errors.StoreVersionError`).
"""

from __future__ import annotations

import sqlite3

from taskplane.store import schema

_V1 = schema.v1(
    schema.ColumnTypes(integer="INTEGER", sequence="INTEGER PRIMARY KEY AUTOINCREMENT", ordered="")
)

MIGRATIONS: tuple[str, ...] = (_V1,)
"""``MIGRATIONS[i]`` takes a database from version ``i`` to ``i + 1``."""

SCHEMA_VERSION = len(MIGRATIONS)


def current_version(conn: sqlite3.Connection) -> int:
    """The ``schema_version`` recorded in ``conn`` (0 for an empty database)."""
    has_meta = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
    ).fetchone()
    if not has_meta:
        return 0
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row else 0


def migrate(conn: sqlite3.Connection, *, where: str) -> int:
    """Bring ``conn`` to :data:`SCHEMA_VERSION` in one transaction; return the version.

    Args:
        conn: an autocommit-mode connection (``isolation_level=None``).
        where: the database path, for error messages.
    Raises:
        StoreVersionError: the database was written by a newer taskplane.
        sqlite3.Error: the migration failed; nothing was changed.
    """
    version = current_version(conn)
    schema.check_version(version, SCHEMA_VERSION, where)
    if version == SCHEMA_VERSION:
        return version
    conn.execute("BEGIN IMMEDIATE")
    try:
        for step in MIGRATIONS[version:]:
            for statement in _statements(step):
                conn.execute(statement)
        conn.execute(
            "INSERT INTO meta (key, value) VALUES ('schema_version', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (str(SCHEMA_VERSION),),
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return SCHEMA_VERSION


def _statements(script: str) -> list[str]:
    # executescript() would COMMIT implicitly; split so the migration stays one transaction.
    return [s.strip() for s in script.split(";") if s.strip()]
