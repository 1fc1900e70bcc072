"""Task rows on PostgreSQL (:mod:`taskplane.store.task_rows` holds the columns, the
statements and the page query).

Blocking functions of a psycopg connection; they run only inside store ops. Every
lookup is scoped: a Task of another tenant or principal is indistinguishable from a
missing one. A change is a compare-and-swap on ``version`` in one statement.
"""

from __future__ import annotations

from taskplane.model.types import Task
from taskplane.scope import Scope
from taskplane.store import task_rows as rows
from taskplane.store.postgres.qmark import to_format
from taskplane.store.postgres.schema import Connection
from taskplane.store.records import StoredTask, TaskPage, TaskQuery

_LOAD = to_format(rows.LOAD)
_LOAD_SCOPED = to_format(rows.LOAD_SCOPED)
_INSERT = to_format(rows.INSERT)
_UPDATE = to_format(rows.UPDATE)


def load(conn: Connection, task_id: str) -> StoredTask | None:
    """The Task ``task_id`` of any scope (internal callers only), or ``None``."""
    row = conn.execute(_LOAD, (task_id,)).fetchone()
    return rows.from_row(row) if row else None


def load_scoped(conn: Connection, scope: Scope, task_id: str) -> StoredTask:
    """The Task ``task_id`` if ``scope`` owns it.

    Raises:
        TaskNotFound: unknown, or owned by another tenant or principal.
    """
    row = conn.execute(_LOAD_SCOPED, rows.scoped_params(scope, task_id)).fetchone()
    return rows.scoped(row, task_id)


def insert(conn: Connection, task: Task, scope: Scope, source: str, now_ms: int) -> StoredTask:
    """Store a new Task (version 1)."""
    conn.execute(_INSERT, rows.insert_params(task, scope, source, now_ms))
    return StoredTask(task, scope, source, 1, now_ms)


def update(conn: Connection, stored: StoredTask, task: Task, now_ms: int) -> StoredTask:
    """Replace ``stored``'s Task with ``task`` if nobody wrote it since ``stored`` was read.

    Raises:
        VersionConflict: the version moved (see :func:`taskplane.store.task_rows.concurrent_write`).
    """
    if conn.execute(_UPDATE, rows.update_params(stored, task, now_ms)).rowcount != 1:
        raise rows.concurrent_write(task, stored)
    return rows.moved(stored, task, now_ms)


def list_page(conn: Connection, query: TaskQuery) -> TaskPage:
    """One page of ``query.scope``'s Tasks, newest ``status.timestamp`` first; see
    :func:`taskplane.store.task_rows.page_query`.

    Raises:
        InvalidRequest: ``page_token`` is not one this server issued.
    """
    q = rows.page_query(query)
    (count,) = conn.execute(to_format(q.count), q.count_args).fetchone() or (0,)
    page = conn.execute(to_format(q.page), q.page_args).fetchall()
    return rows.page_of(query, page, int(count))
