"""The store's schema, once for every backend: the tables and indexes of each
version, with the engine's column types filled in, and the version rule.

One database holds every record kind the design rules name: Tasks with their history
and artifacts (ProtoJSON), the activation journal (``CLAIM``, ``ACCEPTED``,
``WOKEN``, ``WAKE_DELIVERED``, ``WAKE_FAILED``, ``QUARANTINED``), origins, evidence,
context mappings, reply anchors, outbound deliveries and source checkpoints.

Timestamps are 64-bit integer milliseconds since the Unix epoch (``*_ms`` columns),
except ``tasks.status_ts``, the Task's ``status.timestamp`` as an RFC 3339 string
with millisecond precision (lexicographic order equals time order), used by
ListTasks (see :mod:`taskplane.store.paging`).

``schema_version`` is stored in ``meta``; a backend's migration applies the missing
steps of its ``MIGRATIONS`` in one transaction and refuses a database written by a
newer taskplane (:func:`check_version`).
"""

from __future__ import annotations

import attrs

from taskplane.errors import StoreVersionError


@attrs.frozen
class ColumnTypes:
    """The engine's spelling of the three column kinds the DDL leaves open.

    Attributes:
        integer: a 64-bit integer column type.
        sequence: the type and key of an increasing ``seq`` primary key.
        ordered: what follows ``TEXT`` on a column that orders pages (``task_id``,
            ``status_ts``), so that its order is byte order (``""`` when it already is).
    """

    integer: str
    sequence: str
    ordered: str


_V1 = """
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE tasks (
    task_id       TEXT{ordered} PRIMARY KEY,
    tenant        TEXT NOT NULL,
    principal     TEXT NOT NULL,
    source        TEXT NOT NULL,
    context_id    TEXT NOT NULL,
    state         TEXT NOT NULL,
    status_ts     TEXT{ordered} NOT NULL,
    task_json     TEXT NOT NULL,
    version       {integer} NOT NULL,
    created_at_ms {integer} NOT NULL,
    updated_at_ms {integer} NOT NULL
);
CREATE INDEX tasks_by_scope ON tasks (tenant, principal, status_ts DESC, task_id DESC);
CREATE INDEX tasks_by_context ON tasks (tenant, principal, context_id);
CREATE TABLE journal (
    seq            {sequence},
    kind           TEXT NOT NULL CHECK (kind IN
                   ('CLAIM','ACCEPTED','WOKEN','WAKE_DELIVERED','WAKE_FAILED','QUARANTINED')),
    activation_id  TEXT NOT NULL,
    provider_key   TEXT,
    task_id        TEXT,
    record_json    TEXT NOT NULL,
    recorded_at_ms {integer} NOT NULL
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
    recorded_at_ms {integer} NOT NULL
);
CREATE INDEX origins_by_task ON origins (task_id);
CREATE TABLE evidence (
    seq            {sequence},
    record_type    TEXT NOT NULL,
    activation_id  TEXT,
    task_id        TEXT,
    record_json    TEXT NOT NULL,
    recorded_at_ms {integer} NOT NULL
);
CREATE INDEX evidence_by_task ON evidence (task_id);
CREATE TABLE contexts (
    tenant            TEXT NOT NULL,
    principal         TEXT NOT NULL,
    source            TEXT NOT NULL,
    conversation_key  TEXT NOT NULL,
    context_id        TEXT NOT NULL,
    last_active_at_ms {integer} NOT NULL,
    PRIMARY KEY (tenant, principal, source, conversation_key)
);
CREATE INDEX contexts_by_id ON contexts (tenant, principal, context_id);
CREATE TABLE reply_anchors (
    tenant               TEXT NOT NULL,
    principal            TEXT NOT NULL,
    source               TEXT NOT NULL,
    provider_response_id TEXT NOT NULL,
    task_id              TEXT NOT NULL,
    created_at_ms        {integer} NOT NULL,
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
    updated_at_ms        {integer} NOT NULL
);
CREATE TABLE source_checkpoints (
    principal  TEXT NOT NULL,
    source     TEXT NOT NULL,
    value_json TEXT NOT NULL,
    PRIMARY KEY (principal, source)
);
"""


def v1(types: ColumnTypes) -> str:
    """The version-1 DDL script (``;``-separated statements) in ``types``."""
    return _V1.format(integer=types.integer, sequence=types.sequence, ordered=types.ordered)


def check_version(version: int, known: int, where: str) -> None:
    """Refuse a database whose ``schema_version`` is newer than this taskplane knows.

    Raises:
        StoreVersionError: ``version`` is greater than ``known``.
    """
    if version > known:
        raise StoreVersionError(
            f"the store at {where} has schema_version {version}, but this taskplane "
            f"understands at most {known}; upgrade taskplane to open it"
        )
