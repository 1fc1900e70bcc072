"""Task rows: the durable A2A Task (ProtoJSON) of one (tenant, principal).

Blocking functions of a ``sqlite3.Connection``; they run only inside store ops.
Every lookup is scoped: a Task of another tenant or principal is indistinguishable
from a missing one.
"""

from __future__ import annotations

import sqlite3

import attrs

from taskplane.errors import Internal, TaskNotFound
from taskplane.model.codec import decode_json, encode_json
from taskplane.model.types import Task
from taskplane.scope import Scope
from taskplane.store.paging import decode_token, encode_token, format_ts, status_ts
from taskplane.store.records import StoredTask, TaskPage, TaskQuery

_COLUMNS = "task_json, tenant, principal, source, version, updated_at_ms"


def _row(row: tuple[str, str, str, str, int, int]) -> StoredTask:
    task_json, tenant, principal, source, version, updated = row
    return StoredTask(
        task=decode_json(task_json, Task),
        scope=Scope(tenant, principal),
        source=source,
        version=version,
        updated_at_ms=updated,
    )


def load(conn: sqlite3.Connection, task_id: str) -> StoredTask | None:
    """The Task ``task_id`` of any scope (internal callers only), or ``None``."""
    row = conn.execute(f"SELECT {_COLUMNS} FROM tasks WHERE task_id = ?", (task_id,)).fetchone()
    return _row(row) if row else None


def load_scoped(conn: sqlite3.Connection, scope: Scope, task_id: str) -> StoredTask:
    """The Task ``task_id`` if ``scope`` owns it.

    Raises:
        TaskNotFound: unknown, or owned by another tenant or principal.
    """
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM tasks WHERE task_id = ? AND tenant = ? AND principal = ?",
        (task_id, scope.tenant, scope.principal),
    ).fetchone()
    if row is None:
        raise TaskNotFound(f"task {task_id} was not found", metadata={"taskId": task_id})
    return _row(row)


def insert(
    conn: sqlite3.Connection, task: Task, scope: Scope, source: str, now_ms: int
) -> StoredTask:
    """Store a new Task (version 1)."""
    conn.execute(
        "INSERT INTO tasks (task_id, tenant, principal, source, context_id, state, status_ts,"
        " task_json, version, created_at_ms, updated_at_ms)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?)",
        (
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
        ),
    )
    return StoredTask(task, scope, source, 1, now_ms)


def update(conn: sqlite3.Connection, stored: StoredTask, task: Task, now_ms: int) -> StoredTask:
    """Replace ``stored``'s Task with ``task`` if nobody wrote it since ``stored`` was read.

    Raises:
        Internal: the version moved (a second writer: a bug, since the per-task
            owner is the only writer of its Task).
    """
    cur = conn.execute(
        "UPDATE tasks SET state = ?, status_ts = ?, task_json = ?, version = version + 1,"
        " updated_at_ms = ? WHERE task_id = ? AND version = ?",
        (
            task.status.state.name,
            status_ts(task),
            encode_json(task).decode(),
            now_ms,
            task.id,
            stored.version,
        ),
    )
    if cur.rowcount != 1:
        raise Internal(f"task {task.id} was written concurrently (version {stored.version})")
    return attrs.evolve(stored, task=task, version=stored.version + 1, updated_at_ms=now_ms)


def list_page(conn: sqlite3.Connection, query: TaskQuery) -> TaskPage:
    """One page of ``query.scope``'s Tasks, newest ``status.timestamp`` first (digest
    D11.6); see :class:`TaskQuery`.

    Raises:
        InvalidRequest: ``page_token`` is not one this server issued.
    """
    scope, context_id, state = query.scope, query.context_id, query.state
    status_after, page_size, page_token = query.status_after, query.page_size, query.page_token
    where = ["tenant = ?", "principal = ?"]
    args: list[object] = [scope.tenant, scope.principal]
    if context_id is not None:
        where.append("context_id = ?")
        args.append(context_id)
    if state is not None:
        where.append("state = ?")
        args.append(state.name)
    if status_after is not None:
        where.append("status_ts >= ?")
        args.append(format_ts(status_after))
    total = conn.execute(f"SELECT COUNT(*) FROM tasks WHERE {' AND '.join(where)}", args).fetchone()
    if page_token:
        cursor_ts, cursor_id = decode_token(page_token)
        where.append("(status_ts, task_id) < (?, ?)")
        args.extend([cursor_ts, cursor_id])
    rows = conn.execute(
        f"SELECT {_COLUMNS}, status_ts, task_id FROM tasks WHERE {' AND '.join(where)}"
        " ORDER BY status_ts DESC, task_id DESC LIMIT ?",
        [*args, page_size + 1],
    ).fetchall()
    more = len(rows) > page_size
    rows = rows[:page_size]
    token = encode_token(rows[-1][6], rows[-1][7]) if more and rows else ""
    return TaskPage(tuple(_row(r[:6]).task for r in rows), token, int(total[0]))
