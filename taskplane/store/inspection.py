"""What the operator commands read from a store, once for every backend: the
store's invariants, the full view of one Task, and the grouped counts of ``store
stats``. Portable SQL without parameters; each backend runs it on its own session
(SQLite adds its page integrity check, PostgreSQL its snapshot transaction).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from taskplane.model.codec import encode
from taskplane.store.records import StoredTask

Rows = Callable[[str], Sequence[Sequence[Any]]]
"""Every row of one parameterless statement."""

INVARIANTS = (
    (
        "accepted claim without its Task",
        "SELECT c.activation_id, c.task_id FROM journal c WHERE c.kind = 'CLAIM'"
        " AND c.task_id IS NOT NULL AND EXISTS (SELECT 1 FROM journal a"
        " WHERE a.activation_id = c.activation_id AND a.kind = 'ACCEPTED')"
        " AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.task_id = c.task_id)",
    ),
    (
        "journal record about a missing Task",
        "SELECT j.kind || ' ' || j.activation_id, j.task_id FROM journal j"
        " WHERE j.task_id IS NOT NULL"
        " AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.task_id = j.task_id)",
    ),
    (
        "origin of a missing Task",
        "SELECT o.origin_id, o.task_id FROM origins o"
        " WHERE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.task_id = o.task_id)",
    ),
)
"""``(name, statement)``: each statement's rows are ``(what, task_id)`` violations."""


def invariant_problems(
    rows: Rows, load: Callable[[str], StoredTask | None], *, task_order: str = ""
) -> list[str]:
    """The store's invariants, one line per problem (empty when sound): every
    accepted claim has its Task, no journal record or origin outlives its Task, and
    every Task row decodes to a Task whose id, contextId and state match its columns.

    Args:
        rows: runs a statement on the backend's session.
        load: the backend's Task read (it raises when a row does not decode).
        task_order: an ``ORDER BY`` clause for the Task rows (``""``: engine order).
    """
    problems: list[str] = []
    for name, sql in INVARIANTS:
        problems += [f"{name}: {a} -> Task {b}" for a, b in rows(sql)]
    for task_id, context_id, state in rows(
        "SELECT task_id, context_id, state FROM tasks" + task_order
    ):
        try:
            stored = load(task_id)
        except Exception as exc:  # a row that does not decode is the finding
            problems.append(f"Task {task_id} does not decode: {exc}")
            continue
        assert stored is not None
        task = stored.task
        if (task.id, task.context_id, task.status.state.name) != (task_id, context_id, state):
            problems.append(f"Task {task_id}: its JSON disagrees with its columns")
    return problems


def task_detail(stored: StoredTask | None) -> dict[str, Any] | None:
    """``{"tenant", "principal", "source", "version", "updatedAtMs", "task"}`` with the
    whole Task (history and artifacts, ProtoJSON), or ``None`` if unknown."""
    if stored is None:
        return None
    return {
        "tenant": stored.scope.tenant,
        "principal": stored.scope.principal,
        "source": stored.source,
        "version": stored.version,
        "updatedAtMs": stored.updated_at_ms,
        "task": encode(stored.task),
    }


def grouped_counts(rows: Rows) -> dict[str, dict[str, int]]:
    """The counts of ``store stats``: ``tasksByState``, ``tasksByPrincipal``
    (``tenant/principal``, or the principal in the default tenant), ``journalByKind``
    and ``deliveriesByState``."""

    def grouped(sql: str) -> dict[str, int]:
        return {str(key): int(count) for key, count in rows(sql)}

    return {
        "tasksByState": grouped("SELECT state, count(*) FROM tasks GROUP BY state"),
        "tasksByPrincipal": grouped(
            "SELECT CASE tenant WHEN '' THEN principal ELSE tenant || '/' || principal END,"
            " count(*) FROM tasks GROUP BY tenant, principal"
        ),
        "journalByKind": grouped("SELECT kind, count(*) FROM journal GROUP BY kind"),
        "deliveriesByState": grouped("SELECT state, count(*) FROM deliveries GROUP BY state"),
    }
