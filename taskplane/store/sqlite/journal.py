"""The activation journal: CLAIM, ACCEPTED, WOKEN, WAKE_DELIVERED, WAKE_FAILED, QUARANTINED.

The journal is the intake and dedupe authority (design rule "Contract
decisions"): one ``CLAIM`` per provider key, whose ``record_json`` carries the
activation digest and the stored outcome.

Blocking functions of a ``sqlite3.Connection``, called only inside store ops.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping
from typing import Any

from taskplane.store import journal as shared
from taskplane.store.records import (
    ActivationState,
    JournalEntry,
    JournalRecord,
    PendingActivation,
)
from taskplane.store.rows import Claim, read_claim, record_json


def find_claim(conn: sqlite3.Connection, key: str) -> Claim | None:
    """The CLAIM recorded under provider key ``key``, or ``None``."""
    row = conn.execute(
        "SELECT activation_id, record_json FROM journal WHERE kind = 'CLAIM' AND provider_key = ?",
        (key,),
    ).fetchone()
    return None if row is None else read_claim(row[0], row[1])


def claimed_keys(conn: sqlite3.Connection) -> tuple[int, Iterator[str]]:
    """How many CLAIMs are recorded, and an iterator over their provider keys (unordered;
    consume it inside the same store op). Read by intake's claim index at startup."""
    (count,) = conn.execute("SELECT count(*) FROM journal WHERE kind = 'CLAIM'").fetchone()
    rows = conn.execute("SELECT provider_key FROM journal WHERE kind = 'CLAIM'")
    return int(count), (key for (key,) in rows if key is not None)


def forget_activation(conn: sqlite3.Connection, activation: str) -> None:
    """Delete every journal record of ``activation`` (its Task is gone)."""
    conn.execute("DELETE FROM journal WHERE activation_id = ?", (activation,))


def append(
    conn: sqlite3.Connection,
    kind: str,
    activation: str,
    record: Mapping[str, Any],
    now_ms: int,
    *,
    task_id: str | None = None,
    key: str | None = None,
) -> None:
    """Append one journal record of ``kind`` (``key`` only for CLAIM)."""
    conn.execute(
        "INSERT INTO journal (kind, activation_id, provider_key, task_id, record_json,"
        " recorded_at_ms) VALUES (?, ?, ?, ?, ?, ?)",
        (
            kind,
            activation,
            key,
            task_id,
            record_json(kind, activation, record),
            now_ms,
        ),
    )


def activation_state(conn: sqlite3.Connection, activation: str) -> ActivationState:
    """See :func:`taskplane.store.journal.activation_state`."""
    rows = conn.execute(shared.ACTIVATION_ROWS, (activation,)).fetchall()

    def newer(task_id: str, seq: int) -> bool:
        return conn.execute(shared.NEWER_CLAIM, (task_id, seq)).fetchone() is not None

    return shared.activation_state(activation, rows, newer)


def replayable_activations(conn: sqlite3.Connection) -> tuple[PendingActivation, ...]:
    """Activations eligible for a wake at startup, oldest first.

    Design rules "Wake recovery follows durable Task state": only the newest
    accepted activation of each non-terminal Task, even one already ``WOKEN``; not
    one that ``WAKE_FAILED`` or was ``QUARANTINED``; not an unanswered
    INPUT_REQUIRED / AUTH_REQUIRED Task whose newest activation was already woken
    (it waits for a newer continuation). Terminal Tasks are filtered here, before
    queue admission, so they never count toward the bound.
    """
    # From the live Tasks (CROSS JOIN keeps them the outer loop) to their newest
    # claim on the journal's task index: startup does not visit every claim.
    rows = conn.execute(
        """
        WITH newest AS (
            SELECT c.task_id, MAX(c.seq) AS seq
            FROM tasks l CROSS JOIN journal c ON c.task_id = l.task_id AND c.kind = 'CLAIM'
            WHERE l.state NOT IN ('TASK_STATE_COMPLETED', 'TASK_STATE_FAILED',
                                  'TASK_STATE_CANCELED', 'TASK_STATE_REJECTED')
            GROUP BY c.task_id
        )
        SELECT j.activation_id, j.task_id, t.state, t.context_id,
               EXISTS (SELECT 1 FROM journal w WHERE w.activation_id = j.activation_id
                       AND w.kind = 'WOKEN') AS woken
        FROM newest n
        CROSS JOIN journal j ON j.seq = n.seq
        JOIN tasks t ON t.task_id = j.task_id
        WHERE EXISTS (SELECT 1 FROM journal a WHERE a.activation_id = j.activation_id
                      AND a.kind = 'ACCEPTED')
          AND NOT EXISTS (SELECT 1 FROM journal f WHERE f.activation_id = j.activation_id
                          AND f.kind IN ('WAKE_FAILED', 'QUARANTINED'))
          AND t.state NOT IN ('TASK_STATE_COMPLETED', 'TASK_STATE_FAILED',
                              'TASK_STATE_CANCELED', 'TASK_STATE_REJECTED')
        ORDER BY j.seq
        """
    ).fetchall()
    return tuple(
        PendingActivation(activation, task_id, context_id)
        for activation, task_id, state, context_id, woken in rows
        if not (woken and state in ("TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"))
    )


def append_record(conn: sqlite3.Connection, record: JournalRecord, now_ms: int) -> None:
    """Append ``record`` (a wake record; CLAIM and ACCEPTED are acceptance's)."""
    append(
        conn,
        record.kind,
        record.activation_id,
        dict(record.fields),
        now_ms,
        task_id=record.task_id,
    )


def entries(
    conn: sqlite3.Connection, task_id: str | None, activation: str | None
) -> tuple[JournalEntry, ...]:
    """Journal records, oldest first, optionally of one Task and/or one activation."""
    rows = conn.execute(
        "SELECT kind, activation_id, task_id, record_json, recorded_at_ms FROM journal"
        " WHERE (? IS NULL OR task_id = ?) AND (? IS NULL OR activation_id = ?) ORDER BY seq",
        (task_id, task_id, activation, activation),
    ).fetchall()
    return tuple(shared.entry(row) for row in rows)
