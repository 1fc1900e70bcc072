"""The activation journal: CLAIM, ACCEPTED, WOKEN, WAKE_DELIVERED, WAKE_FAILED, QUARANTINED.

The journal is the intake and dedupe authority (design rule "Idempotency is
mandatory"): one ``CLAIM`` per provider key (a unique partial index), whose
``record_json`` carries the activation digest and the stored outcome.

Blocking functions of a psycopg connection, called only inside store ops.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from taskplane.store import journal as shared
from taskplane.store.postgres import wakes
from taskplane.store.postgres.schema import Connection
from taskplane.store.records import (
    ActivationState,
    JournalEntry,
    PendingActivation,
)
from taskplane.store.rows import Claim, read_claim, record_json

CLAIM_SCAN_ROWS = 10_000
"""Provider keys fetched per round trip while the claim index is loaded."""


def find_claim(conn: Connection, key: str) -> Claim | None:
    """The CLAIM recorded under provider key ``key``, or ``None``."""
    row = conn.execute(
        "SELECT activation_id, record_json FROM journal WHERE kind = 'CLAIM' AND provider_key = %s",
        (key,),
    ).fetchone()
    return None if row is None else read_claim(row[0], row[1])


def claimed_keys(conn: Connection) -> tuple[int, Iterator[str]]:
    """How many CLAIMs are recorded, and an iterator over their provider keys (unordered;
    consume it inside the same store op). Read by intake's claim index at startup,
    through a server-side cursor, so memory stays bounded however many there are."""
    row = conn.execute("SELECT count(*) FROM journal WHERE kind = 'CLAIM'").fetchone()

    def keys() -> Iterator[str]:
        with conn.cursor(name="claimed_keys") as cursor:
            cursor.itersize = CLAIM_SCAN_ROWS
            cursor.execute("SELECT provider_key FROM journal WHERE kind = 'CLAIM'")
            for (key,) in cursor:
                if key is not None:
                    yield key

    return (int(row[0]) if row else 0), keys()


def forget_activation(conn: Connection, activation: str) -> None:
    """Delete every journal record of ``activation`` (its Task is gone), and its wake
    row with the slot and lane it may hold."""
    conn.execute("DELETE FROM journal WHERE activation_id = %s", (activation,))
    wakes.forget(conn, (activation,))


def append(
    conn: Connection,
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
        " recorded_at_ms) VALUES (%s, %s, %s, %s, %s, %s)",
        (kind, activation, key, task_id, record_json(kind, activation, record), now_ms),
    )


_ACTIVATION_ROWS_AND_NEWER = (
    "SELECT j.kind, j.task_id, j.record_json, j.seq, j.kind = 'CLAIM' AND EXISTS ("
    "SELECT 1 FROM journal n WHERE n.kind = 'CLAIM' AND n.task_id = j.task_id"
    " AND n.seq > j.seq) FROM journal j WHERE j.activation_id = %s"
)
""":data:`~taskplane.store.journal.ACTIVATION_ROWS` with, on the CLAIM row,
:data:`~taskplane.store.journal.NEWER_CLAIM` for it: one round trip."""


def activation_state(conn: Connection, activation: str) -> ActivationState:
    """See :func:`taskplane.store.journal.activation_state` (one statement)."""
    rows = conn.execute(_ACTIVATION_ROWS_AND_NEWER, (activation,)).fetchall()
    newer_of = {(r[1], r[3]): bool(r[4]) for r in rows if r[0] == "CLAIM"}
    return shared.activation_state(
        activation, [r[:4] for r in rows], lambda task_id, seq: newer_of[(task_id, seq)]
    )


_TERMINAL = (
    "'TASK_STATE_COMPLETED', 'TASK_STATE_FAILED', 'TASK_STATE_CANCELED', 'TASK_STATE_REJECTED'"
)


def replayable_activations(conn: Connection) -> tuple[PendingActivation, ...]:
    """Activations eligible for a wake at startup, oldest first.

    Design rule "Wake recovery follows durable Task state": only the newest accepted
    activation of each non-terminal Task, even one already ``WOKEN``; not one that
    ``WAKE_FAILED`` or was ``QUARANTINED``; not an unanswered INPUT_REQUIRED /
    AUTH_REQUIRED Task whose newest activation was already woken.
    """
    rows = conn.execute(
        f"""
        WITH newest AS (
            SELECT c.task_id, max(c.seq) AS seq
            FROM tasks l JOIN journal c ON c.task_id = l.task_id AND c.kind = 'CLAIM'
            WHERE l.state NOT IN ({_TERMINAL})
            GROUP BY c.task_id
        )
        SELECT j.activation_id, j.task_id, t.state, t.context_id,
               EXISTS (SELECT 1 FROM journal w WHERE w.activation_id = j.activation_id
                       AND w.kind = 'WOKEN') AS woken
        FROM newest n
        JOIN journal j ON j.seq = n.seq
        JOIN tasks t ON t.task_id = j.task_id
        WHERE EXISTS (SELECT 1 FROM journal a WHERE a.activation_id = j.activation_id
                      AND a.kind = 'ACCEPTED')
          AND NOT EXISTS (SELECT 1 FROM journal f WHERE f.activation_id = j.activation_id
                          AND f.kind IN ('WAKE_FAILED', 'QUARANTINED'))
        ORDER BY j.seq
        """
    ).fetchall()
    return tuple(
        PendingActivation(activation, task_id, context_id)
        for activation, task_id, state, context_id, woken in rows
        if not (woken and state in ("TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"))
    )


def entries(
    conn: Connection, task_id: str | None, activation: str | None
) -> tuple[JournalEntry, ...]:
    """Journal records, oldest first, optionally of one Task and/or one activation."""
    rows = conn.execute(
        "SELECT kind, activation_id, task_id, record_json, recorded_at_ms FROM journal"
        " WHERE (%(task)s::text IS NULL OR task_id = %(task)s)"
        " AND (%(act)s::text IS NULL OR activation_id = %(act)s) ORDER BY seq",
        {"task": task_id, "act": activation},
    ).fetchall()
    return tuple(shared.entry(row) for row in rows)
