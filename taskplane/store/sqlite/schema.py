"""SQLite schema of the task-plane store and its forward migrations.

One database file (``taskplane.sqlite3``) in the store root holds every record kind
the design rules names: Tasks with their history and
artifacts (ProtoJSON), the activation journal (``CLAIM``, ``ACCEPTED``, ``WOKEN``,
``WAKE_DELIVERED``, ``WAKE_FAILED``, ``QUARANTINED``), origins, evidence, context
mappings, reply anchors, outbound deliveries and source checkpoints.

Timestamps are integer milliseconds since the Unix epoch (``*_ms`` columns), except
``tasks.status_ts``, the Task's ``status.timestamp`` as an RFC 3339 string with
millisecond precision (lexicographic order equals time order), used by ListTasks.

``SCHEMA_VERSION`` is stored in ``meta``; :func:`migrate` applies the missing steps of
``MIGRATIONS`` in order inside one transaction, and refuses a database written by a
newer taskplane (:class:`~taskplane.errors.StoreVersionError`).
"""

from __future__ import annotations

import sqlite3

from taskplane.errors import StoreVersionError

_V1 = """
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE tasks (
    task_id       TEXT PRIMARY KEY,
    tenant        TEXT NOT NULL,
    principal     TEXT NOT NULL,
    source        TEXT NOT NULL,
    context_id    TEXT NOT NULL,
    state         TEXT NOT NULL,
    status_ts     TEXT NOT NULL,
    task_json     TEXT NOT NULL,
    version       INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
);
CREATE INDEX tasks_by_scope ON tasks (tenant, principal, status_ts DESC, task_id DESC);
CREATE INDEX tasks_by_context ON tasks (tenant, principal, context_id);
CREATE TABLE journal (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    kind           TEXT NOT NULL CHECK (kind IN
                   ('CLAIM','ACCEPTED','WOKEN','WAKE_DELIVERED','WAKE_FAILED','QUARANTINED')),
    activation_id  TEXT NOT NULL,
    provider_key   TEXT,
    task_id        TEXT,
    record_json    TEXT NOT NULL,
    recorded_at_ms INTEGER NOT NULL
);
CREATE UNIQUE INDEX journal_claim_by_provider_key ON journal (provider_key)
    WHERE kind = 'CLAIM';
CREATE INDEX journal_by_activation ON journal (activation_id, kind);
CREATE INDEX journal_by_task ON journal (task_id, kind);
CREATE TABLE origins (
    origin_id      TEXT PRIMARY KEY,
    activation_id  TEXT NOT NULL,
    task_id        TEXT NOT NULL,
    relation       TEXT NOT NULL CHECK (relation IN ('created','continued')),
    locator_json   TEXT NOT NULL,
    recorded_at_ms INTEGER NOT NULL
);
CREATE INDEX origins_by_task ON origins (task_id);
CREATE TABLE evidence (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    record_type    TEXT NOT NULL,
    activation_id  TEXT,
    task_id        TEXT,
    record_json    TEXT NOT NULL,
    recorded_at_ms INTEGER NOT NULL
);
CREATE INDEX evidence_by_task ON evidence (task_id);
CREATE TABLE contexts (
    tenant            TEXT NOT NULL,
    principal         TEXT NOT NULL,
    source            TEXT NOT NULL,
    conversation_key  TEXT NOT NULL,
    context_id        TEXT NOT NULL,
    last_active_at_ms INTEGER NOT NULL,
    PRIMARY KEY (tenant, principal, source, conversation_key)
);
CREATE INDEX contexts_by_id ON contexts (tenant, principal, context_id);
CREATE TABLE reply_anchors (
    tenant               TEXT NOT NULL,
    principal            TEXT NOT NULL,
    source               TEXT NOT NULL,
    provider_response_id TEXT NOT NULL,
    task_id              TEXT NOT NULL,
    created_at_ms        INTEGER NOT NULL,
    PRIMARY KEY (tenant, principal, source, provider_response_id)
);
CREATE TABLE deliveries (
    delivery_id          TEXT PRIMARY KEY,
    task_id              TEXT NOT NULL,
    source               TEXT NOT NULL,
    operation_id         TEXT NOT NULL,
    payload_digest       TEXT NOT NULL,
    recovery             TEXT NOT NULL CHECK (recovery IN ('idempotent','lookup','ambiguous')),
    payload_policy       TEXT,
    state                TEXT NOT NULL
                         CHECK (state IN ('prepared','sending','delivered','failed','ambiguous')),
    provider_response_id TEXT,
    error                TEXT,
    updated_at_ms        INTEGER NOT NULL
);
CREATE TABLE source_checkpoints (
    principal  TEXT NOT NULL,
    source     TEXT NOT NULL,
    value_json TEXT NOT NULL,
    PRIMARY KEY (principal, source)
);
"""

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
    if version > SCHEMA_VERSION:
        raise StoreVersionError(
            f"the store at {where} has schema_version {version}, but this taskplane "
            f"understands at most {SCHEMA_VERSION}; upgrade taskplane to open it"
        )
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
