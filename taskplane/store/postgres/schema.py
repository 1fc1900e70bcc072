"""PostgreSQL schema of the task-plane store and its versioned migrations.

The same record kinds as the SQLite store (Tasks, the activation journal, origins,
evidence, contexts, reply anchors, deliveries, source checkpoints), in the tables of
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

from taskplane.errors import StoreVersionError

MIGRATION_LOCK = 0x7461736B706C616E
"""The advisory-lock key the migrating node holds (``"taskplan"`` as a 64-bit int)."""

_V1 = """
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE tasks (
    task_id       TEXT COLLATE "C" PRIMARY KEY,
    tenant        TEXT NOT NULL,
    principal     TEXT NOT NULL,
    source        TEXT NOT NULL,
    context_id    TEXT NOT NULL,
    state         TEXT NOT NULL,
    status_ts     TEXT COLLATE "C" NOT NULL,
    task_json     TEXT NOT NULL,
    version       BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);
CREATE INDEX tasks_by_scope ON tasks (tenant, principal, status_ts DESC, task_id DESC);
CREATE INDEX tasks_by_context ON tasks (tenant, principal, context_id);
CREATE INDEX tasks_by_source ON tasks (source, updated_at_ms);
CREATE TABLE journal (
    seq            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind           TEXT NOT NULL CHECK (kind IN
                   ('CLAIM','ACCEPTED','WOKEN','WAKE_DELIVERED','WAKE_FAILED','QUARANTINED')),
    activation_id  TEXT NOT NULL,
    provider_key   TEXT,
    task_id        TEXT,
    record_json    TEXT NOT NULL,
    recorded_at_ms BIGINT NOT NULL
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
    recorded_at_ms BIGINT NOT NULL
);
CREATE INDEX origins_by_task ON origins (task_id);
CREATE TABLE evidence (
    seq            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    record_type    TEXT NOT NULL,
    activation_id  TEXT,
    task_id        TEXT,
    record_json    TEXT NOT NULL,
    recorded_at_ms BIGINT NOT NULL
);
CREATE INDEX evidence_by_task ON evidence (task_id);
CREATE TABLE contexts (
    tenant            TEXT NOT NULL,
    principal         TEXT NOT NULL,
    source            TEXT NOT NULL,
    conversation_key  TEXT NOT NULL,
    context_id        TEXT NOT NULL,
    last_active_at_ms BIGINT NOT NULL,
    PRIMARY KEY (tenant, principal, source, conversation_key)
);
CREATE INDEX contexts_by_id ON contexts (tenant, principal, context_id);
CREATE TABLE reply_anchors (
    tenant               TEXT NOT NULL,
    principal            TEXT NOT NULL,
    source               TEXT NOT NULL,
    provider_response_id TEXT NOT NULL,
    task_id              TEXT NOT NULL,
    created_at_ms        BIGINT NOT NULL,
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
    updated_at_ms        BIGINT NOT NULL
);
CREATE INDEX deliveries_by_task ON deliveries (task_id);
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
        if version > SCHEMA_VERSION:
            raise StoreVersionError(
                f"the store at {where} has schema_version {version}, but this taskplane "
                f"understands at most {SCHEMA_VERSION}; upgrade taskplane to open it"
            )
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
