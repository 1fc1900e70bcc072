"""Task rows, once for every backend: the columns of the durable A2A Task
(ProtoJSON) of one (tenant, principal), the portable statements (``?`` parameters)
that read, insert and compare-and-swap it, and the ListTasks page query.

Every lookup is scoped: a Task of another tenant or principal is indistinguishable
from a missing one. A change is a compare-and-swap on ``version``. Pure functions
and statements; each backend runs them on its own connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from taskplane.errors import TaskNotFound, VersionConflict
from taskplane.model.codec import decode_json, encode_json
from taskplane.model.types import Task
from taskplane.scope import Scope
from taskplane.store.paging import decode_token, encode_token, format_ts, status_ts
from taskplane.store.records import StoredTask, TaskPage, TaskQuery

COLUMNS = ("task_json", "tenant", "principal", "source", "version", "updated_at_ms")
"""The columns a :class:`StoredTask` is read from, in :func:`from_row`'s order."""

SELECT = ", ".join(COLUMNS)

LOAD = f"SELECT {SELECT} FROM tasks WHERE task_id = ?"
"""One Task of any scope; the parameter is its id."""

LOAD_SCOPED = f"SELECT {SELECT} FROM tasks WHERE task_id = ? AND tenant = ? AND principal = ?"
"""One Task of one scope; the parameters are :func:`scoped_params`."""

INSERT = (
    "INSERT INTO tasks (task_id, tenant, principal, source, context_id, state, status_ts,"
    " task_json, version, created_at_ms, updated_at_ms)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?)"
)
"""A new Task at version 1; the parameters are :func:`insert_params`."""

UPDATE = (
    "UPDATE tasks SET state = ?, status_ts = ?, task_json = ?, version = version + 1,"
    " updated_at_ms = ? WHERE task_id = ? AND version = ?"
)
"""The compare-and-swap of a change; the parameters are :func:`update_params`."""


def from_row(row: Sequence[Any]) -> StoredTask:
    """The :class:`StoredTask` of a row that starts with :data:`COLUMNS`."""
    task_json, tenant, principal, source, version, updated = row[:6]
    return StoredTask(
        task=decode_json(task_json, Task),
        scope=Scope(tenant, principal),
        source=source,
        version=version,
        updated_at_ms=updated,
    )


def scoped_params(scope: Scope, task_id: str) -> tuple[object, ...]:
    """The parameters of :data:`LOAD_SCOPED`."""
    return (task_id, scope.tenant, scope.principal)


def scoped(row: Sequence[Any] | None, task_id: str) -> StoredTask:
    """The Task of a :data:`LOAD_SCOPED` row.

    Raises:
        TaskNotFound: no row (unknown, or owned by another tenant or principal).
    """
    if row is None:
        raise TaskNotFound(f"task {task_id} was not found", metadata={"taskId": task_id})
    return from_row(row)


def insert_params(task: Task, scope: Scope, source: str, now_ms: int) -> tuple[object, ...]:
    """The parameters of :data:`INSERT` for a new Task."""
    return (
        task.id,
        scope.tenant,
        scope.principal,
        source,
        task.context_id,
        task.status.state.name,
        status_ts(task),
        encode_json(task).decode(),
        now_ms,
        now_ms,
    )


def update_params(stored: StoredTask, task: Task, now_ms: int) -> tuple[object, ...]:
    """The parameters of :data:`UPDATE` (compare-and-swap on ``stored.version``)."""
    return (
        task.status.state.name,
        status_ts(task),
        encode_json(task).decode(),
        now_ms,
        task.id,
        stored.version,
    )


def moved(stored: StoredTask, task: Task, now_ms: int) -> StoredTask:
    """``stored`` after a successful :data:`UPDATE` to ``task``."""
    return attrs.evolve(stored, task=task, version=stored.version + 1, updated_at_ms=now_ms)


def concurrent_write(task: Task, stored: StoredTask) -> VersionConflict:
    """The error of a compare-and-swap that found the version moved (or the Task gone):
    another writer (owner(T) on another node) committed first; design rule "One writer
    per Task" (the owner reloads, decides again and retries)."""
    return VersionConflict(f"task {task.id} was written concurrently (version {stored.version})")


@attrs.frozen
class PageQuery:
    """The statements of one ListTasks page (``?`` parameters).

    Attributes:
        count: the matching Tasks' count (``count_args``).
        page: up to ``page_size + 1`` rows of :data:`COLUMNS`, then ``status_ts`` and
            ``task_id``, newest ``status.timestamp`` first (``page_args``).
    """

    count: str
    count_args: tuple[object, ...]
    page: str
    page_args: tuple[object, ...]


def page_query(query: TaskQuery) -> PageQuery:
    """The statements of ``query``'s page (see :class:`TaskQuery` and
    :mod:`taskplane.store.paging`).

    Raises:
        InvalidRequest: ``page_token`` is not one this server issued.
    """
    where = ["tenant = ?", "principal = ?"]
    args: list[object] = [query.scope.tenant, query.scope.principal]
    if query.context_id is not None:
        where.append("context_id = ?")
        args.append(query.context_id)
    if query.state is not None:
        where.append("state = ?")
        args.append(query.state.name)
    if query.status_after is not None:
        where.append("status_ts >= ?")
        args.append(format_ts(query.status_after))
    count = f"SELECT count(*) FROM tasks WHERE {' AND '.join(where)}"
    count_args = tuple(args)
    if query.page_token:
        where.append("(status_ts, task_id) < (?, ?)")
        args.extend(decode_token(query.page_token))
    page = (
        f"SELECT {SELECT}, status_ts, task_id FROM tasks WHERE {' AND '.join(where)}"
        " ORDER BY status_ts DESC, task_id DESC LIMIT ?"
    )
    return PageQuery(count, count_args, page, (*args, query.page_size + 1))


def page_of(query: TaskQuery, rows: Sequence[Sequence[Any]], total: int) -> TaskPage:
    """The :class:`TaskPage` of ``query``'s page rows (see :func:`page_query`)."""
    more = len(rows) > query.page_size
    rows = rows[: query.page_size]
    token = encode_token(rows[-1][6], rows[-1][7]) if more and rows else ""
    return TaskPage(tuple(from_row(r).task for r in rows), token, total)
