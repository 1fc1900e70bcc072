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

# --- cluster membership: the node registry and leader leases (own block) -----------
CLUSTER_NODES = """
CREATE TABLE nodes (
    node_id TEXT PRIMARY KEY,
    instance TEXT NOT NULL,
    public_url TEXT NOT NULL,
    host TEXT NOT NULL,
    pid BIGINT NOT NULL,
    lease_ttl_s DOUBLE PRECISION NOT NULL,
    schema_version BIGINT NOT NULL,
    started_at TIMESTAMPTZ NOT NULL,
    heartbeat_at TIMESTAMPTZ NOT NULL
);
CREATE TABLE leases (
    name TEXT PRIMARY KEY,
    node_id TEXT NOT NULL,
    epoch BIGINT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
"""
"""The node registry (:mod:`taskplane.store.postgres.nodes`) and the leader leases
(:mod:`taskplane.store.postgres.leases`); times are the database's ``now()``."""
# --- end cluster membership ---------------------------------------------------------


# --- change records and the claims watermark (one writer per Task, live updates) ------
_TASK_EVENTS = """
CREATE TABLE task_events (
    task_id        TEXT NOT NULL,
    version        BIGINT NOT NULL,
    task_json      TEXT NOT NULL,
    recorded_at_ms BIGINT NOT NULL,
    PRIMARY KEY (task_id, version)
);
CREATE INDEX task_events_by_time ON task_events (recorded_at_ms);
CREATE FUNCTION taskplane_task_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO task_events (task_id, version, task_json, recorded_at_ms)
    VALUES (NEW.task_id, NEW.version, NEW.task_json, NEW.updated_at_ms);
    RETURN NULL;
END
$$;
CREATE TRIGGER tasks_record_new AFTER INSERT ON tasks
    FOR EACH ROW EXECUTE FUNCTION taskplane_task_event();
CREATE TRIGGER tasks_record_versions AFTER UPDATE ON tasks
    FOR EACH ROW WHEN (NEW.version IS DISTINCT FROM OLD.version)
    EXECUTE FUNCTION taskplane_task_event();
ALTER TABLE journal ADD COLUMN xid xid8;
ALTER TABLE journal ALTER COLUMN xid SET DEFAULT pg_current_xact_id();
CREATE INDEX journal_claims_by_xid ON journal (xid) WHERE kind = 'CLAIM';
"""
"""Every committed version of a Task as a row of ``task_events``, written by a trigger
in the transaction of the write itself, whichever path wrote it (``apply``, an
acceptance, a continuation, an operator command): what other nodes read to show the
change (:mod:`taskplane.store.postgres.events`). And the transaction id of each
journal row (``xid``), the watermark the claims tail reads by. Claims recorded
before this step have no ``xid``; the claim index loads them at start."""


WAKE_SLOTS = 128
"""Slot rows of the cluster-wide wake bound: ``WAKE_QUEUE_SIZE`` (the store may not
import the actors; a test holds the two equal). Fixed when the step below runs."""

# -- the wake queue as rows (design rules "Wake admission is bounded", "Turn authority
# is a lease"; see taskplane.store.postgres.wakes) ----------------------------------
_WAKE_QUEUE = f"""
CREATE SEQUENCE wake_seq;
CREATE TABLE wakes (
    activation_id TEXT PRIMARY KEY,
    task_id TEXT NOT NULL,
    context_id TEXT,
    lane TEXT NOT NULL,
    seq BIGINT NOT NULL DEFAULT nextval('wake_seq'),
    state TEXT NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'running', 'paused', 'done')),
    node_id TEXT,
    epoch BIGINT NOT NULL DEFAULT 0,
    lease_until TIMESTAMPTZ,
    not_before TIMESTAMPTZ
);
CREATE INDEX wakes_open ON wakes (seq) WHERE state <> 'done';
CREATE INDEX wakes_open_by_lane ON wakes (lane, seq) WHERE state <> 'done';
CREATE INDEX wakes_running_by_node ON wakes (node_id) WHERE state = 'running';
CREATE TABLE wake_lanes (lane TEXT PRIMARY KEY, running_activation TEXT);
CREATE TABLE wake_slots (slot INTEGER PRIMARY KEY, activation_id TEXT UNIQUE);
INSERT INTO wake_slots (slot) SELECT generate_series(0, {WAKE_SLOTS - 1});
"""

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


# --- the accepted source on the wake row (a first delivery without journal reads) ---
WAKE_ACCEPTED_SOURCE = """
ALTER TABLE wakes ADD COLUMN accepted_source TEXT;
"""
"""The Task's source, written on a wake row by the acceptance that queued it (``NULL``
on a row restored from durable state or written before this step): the first claim
of such a wake (epoch 1) delivers it without reading the journal or the Task row, as
the one-process queue delivers a ``Wake.accepted_source``
(:mod:`taskplane.store.postgres.wakes`)."""
# --- end accepted source ---


# --- the accepting node on the wake row (design rule "A wake waits for its node") ---
WAKE_AFFINITY = """
ALTER TABLE wakes ADD COLUMN accepted_by TEXT;
ALTER TABLE wakes ADD COLUMN queued_at TIMESTAMPTZ NOT NULL DEFAULT now();
"""
"""The node whose acceptance queued a wake (``NULL``: a row restored from durable
state, back from a pause, or written before this step) and when, on database time:
for ``AFFINITY_S`` only that node claims it (:mod:`taskplane.store.postgres.wakes`)."""
# --- end accepting node ---


MIGRATIONS: tuple[str, ...] = (
    _V1,
    CLUSTER_NODES,
    _WAKE_QUEUE,
    _TASK_EVENTS,
    AGENT_SESSIONS,
    WAKE_ACCEPTED_SOURCE,
    WAKE_AFFINITY,
)
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
