"""Task rows: the durable A2A Task (ProtoJSON) of one (tenant, principal).

Blocking functions of a psycopg connection; they run only inside store ops. Every
lookup is scoped: a Task of another tenant or principal is indistinguishable from a
missing one. A change is a compare-and-swap on ``version`` in one statement.
"""

from __future__ import annotations

from typing import Any

import attrs

from taskplane.errors import Internal, TaskNotFound
from taskplane.model.codec import decode_json, encode_json
from taskplane.model.types import Task
from taskplane.scope import Scope
from taskplane.store.paging import decode_token, encode_token, format_ts, status_ts
from taskplane.store.postgres.schema import Connection
from taskplane.store.records import StoredTask, TaskPage, TaskQuery

COLUMNS = ("task_json", "tenant", "principal", "source", "version", "updated_at_ms")
_SELECT = ", ".join(COLUMNS)


def from_row(row: tuple[Any, ...]) -> StoredTask:
    """The :class:`StoredTask` of a row of :data:`COLUMNS`."""
    task_json, tenant, principal, source, version, updated = row[:6]
    return StoredTask(
        task=decode_json(task_json, Task),
        scope=Scope(tenant, principal),
        source=source,
        version=version,
        updated_at_ms=updated,
    )


def load(conn: Connection, task_id: str) -> StoredTask | None:
    """The Task ``task_id`` of any scope (internal callers only), or ``None``."""
    row = conn.execute(f"SELECT {_SELECT} FROM tasks WHERE task_id = %s", (task_id,)).fetchone()
    return from_row(row) if row else None


def load_scoped(conn: Connection, scope: Scope, task_id: str) -> StoredTask:
    """The Task ``task_id`` if ``scope`` owns it.

    Raises:
        TaskNotFound: unknown, or owned by another tenant or principal.
    """
    row = conn.execute(
        f"SELECT {_SELECT} FROM tasks WHERE task_id = %s AND tenant = %s AND principal = %s",
        (task_id, scope.tenant, scope.principal),
    ).fetchone()
    if row is None:
        raise TaskNotFound(f"task {task_id} was not found", metadata={"taskId": task_id})
    return from_row(row)


INSERT = (
    "INSERT INTO tasks (task_id, tenant, principal, source, context_id, state, status_ts,"
    " task_json, version, created_at_ms, updated_at_ms)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 1, %s, %s)"
)


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


def insert(conn: Connection, task: Task, scope: Scope, source: str, now_ms: int) -> StoredTask:
    """Store a new Task (version 1)."""
    conn.execute(INSERT, insert_params(task, scope, source, now_ms))
    return StoredTask(task, scope, source, 1, now_ms)


UPDATE = (
    "UPDATE tasks SET state = %s, status_ts = %s, task_json = %s, version = version + 1,"
    " updated_at_ms = %s WHERE task_id = %s AND version = %s"
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


def concurrent_write(task: Task, stored: StoredTask) -> Internal:
    """The error of a compare-and-swap that found the version moved (or the Task gone)."""
    return Internal(f"task {task.id} was written concurrently (version {stored.version})")


def update(conn: Connection, stored: StoredTask, task: Task, now_ms: int) -> StoredTask:
    """Replace ``stored``'s Task with ``task`` if nobody wrote it since ``stored`` was read.

    Raises:
        Internal: the version moved (a second writer: a bug, since the per-task
            owner is the only writer of its Task).
    """
    if conn.execute(UPDATE, update_params(stored, task, now_ms)).rowcount != 1:
        raise concurrent_write(task, stored)
    return moved(stored, task, now_ms)


def list_page(conn: Connection, query: TaskQuery) -> TaskPage:
    """One page of ``query.scope``'s Tasks, newest ``status.timestamp`` first; see
    :class:`TaskQuery` and :mod:`taskplane.store.paging`.

    Raises:
        InvalidRequest: ``page_token`` is not one this server issued.
    """
    where = ["tenant = %s", "principal = %s"]
    args: list[object] = [query.scope.tenant, query.scope.principal]
    if query.context_id is not None:
        where.append("context_id = %s")
        args.append(query.context_id)
    if query.state is not None:
        where.append("state = %s")
        args.append(query.state.name)
    if query.status_after is not None:
        where.append("status_ts >= %s")
        args.append(format_ts(query.status_after))
    total = conn.execute(f"SELECT count(*) FROM tasks WHERE {' AND '.join(where)}", args)
    (count,) = total.fetchone() or (0,)
    if query.page_token:
        where.append("(status_ts, task_id) < (%s, %s)")
        args.extend(decode_token(query.page_token))
    rows = conn.execute(
        f"SELECT {_SELECT}, status_ts, task_id FROM tasks WHERE {' AND '.join(where)}"
        " ORDER BY status_ts DESC, task_id DESC LIMIT %s",
        [*args, query.page_size + 1],
    ).fetchall()
    more = len(rows) > query.page_size
    rows = rows[: query.page_size]
    token = encode_token(rows[-1][6], rows[-1][7]) if more and rows else ""
    return TaskPage(tuple(from_row(r).task for r in rows), token, int(count))
