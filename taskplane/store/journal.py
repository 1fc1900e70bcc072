"""The activation journal's reads, once for every backend: the portable statements
(``?`` parameters) and what an activation's records say about its wake.

Design rule "Wake recovery follows durable Task state": the wake of an activation
is decided from its durable records (their kinds, the deliveries recorded, and
whether a newer CLAIM of its Task exists). Pure functions and statements; each
backend runs them on its own connection.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, cast

from taskplane.store.records import ActivationState, JournalEntry, JournalKind

ACTIVATION_ROWS = "SELECT kind, task_id, record_json, seq FROM journal WHERE activation_id = ?"
"""Every record of one activation (the parameter); rows for :func:`activation_state`."""

NEWER_CLAIM = "SELECT 1 FROM journal WHERE kind = 'CLAIM' AND task_id = ? AND seq > ?"
"""A CLAIM of the Task (first parameter) after the journal position (second)."""


def activation_state(
    activation: str, rows: Sequence[Sequence[Any]], newer_claim: Callable[[str, int], bool]
) -> ActivationState:
    """The record kinds, delivery count and newer-claim flag of ``activation``.

    Args:
        rows: its :data:`ACTIVATION_ROWS`.
        newer_claim: runs :data:`NEWER_CLAIM` for (task id, CLAIM position).
    """
    kinds = frozenset(r[0] for r in rows)
    task_id = next((r[1] for r in rows if r[0] == "CLAIM"), None)
    claim_seq = next((r[3] for r in rows if r[0] == "CLAIM"), 0)
    deliveries = max(
        (json.loads(r[2]).get("delivery", 0) for r in rows if r[0] == "WAKE_DELIVERED"),
        default=0,
    )
    newer = task_id is not None and newer_claim(task_id, claim_seq)
    return ActivationState(activation, task_id, kinds, deliveries, newer)


def entry(row: Sequence[Any]) -> JournalEntry:
    """The :class:`JournalEntry` of a ``(kind, activation_id, task_id, record_json,
    recorded_at_ms)`` row."""
    kind, act, task, record, at = row
    return JournalEntry(cast(JournalKind, kind), act, task, json.loads(record), at)
