"""Direct access to a stopped server's store, for the ``tasks`` and ``store`` commands.

This is the command line's only module that touches the store package or SQLite.
Every function takes the root lock for its whole run (design rule "Only one process
may open a store root"), so it fails at once, naming the holder's pid, while a server
uses the root. Blocking I/O throughout: these run in a short-lived CLI process, never
inside the trio server.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

from taskplane.errors import StoreLocked
from taskplane.model.codec import encode
from taskplane.store import tasks
from taskplane.store.compaction import compact
from taskplane.store.database import DATABASE_FILE_NAME, Database
from taskplane.store.lock import LOCK_FILE_NAME
from taskplane.store.schema import current_version

BACKUP_STEP_PAGES = 256
"""Pages copied per step of an online backup (the progress bar moves per step)."""


class StoreAccessError(Exception):
    """The store cannot be opened or used; the message says why and what to do."""


@contextmanager
def open_store(root: Path) -> Iterator[sqlite3.Connection]:
    """Lock and open the existing store at ``root`` for the duration of the block.

    Raises:
        StoreAccessError: there is no store at ``root``, or a running server holds
            its lock (the message names the pid).
    """
    if not (root / DATABASE_FILE_NAME).is_file():
        raise StoreAccessError(
            f"there is no store at {root} (CHANNELS_TASK_STORE_PATH / --store): "
            f"{DATABASE_FILE_NAME} is missing"
        )
    try:
        db = Database(root)
    except StoreLocked:
        raise StoreAccessError(
            f"the store at {root} is in use by a running taskplane server "
            f"(pid {_holder(root)}); this command opens the store directly, so stop "
            "the server first"
        ) from None
    except (OSError, sqlite3.Error) as exc:
        raise StoreAccessError(f"cannot open the store at {root}: {exc}") from None
    try:
        yield db.conn
    finally:
        db.close()


def _holder(root: Path) -> str:
    try:
        return (root / LOCK_FILE_NAME).read_text().strip() or "unknown"
    except OSError:
        return "unknown"


@attrs.frozen
class TaskFilter:
    """Which Tasks a ``tasks`` command reads; ``None`` matches everything."""

    principal: str | None = None
    context_id: str | None = None
    state: str | None = None
    tenant: str | None = None


def select_tasks(
    conn: sqlite3.Connection, where: TaskFilter, *, limit: int | None = None
) -> list[dict[str, Any]]:
    """Summaries of the matching Tasks, newest status first.

    Each is ``{"id", "contextId", "state", "tenant", "principal", "source",
    "statusTimestamp", "createdAtMs", "updatedAtMs"}`` (times: ms since the epoch).
    """
    clauses, args = _where(where)
    sql = (
        "SELECT task_id, context_id, state, tenant, principal, source, status_ts,"
        f" created_at_ms, updated_at_ms FROM tasks {clauses}"
        " ORDER BY status_ts DESC, task_id DESC"
    )
    if limit is not None:
        sql += " LIMIT ?"
        args.append(limit)
    keys = ("id", "contextId", "state", "tenant", "principal", "source", "statusTimestamp")
    return [
        {**dict(zip(keys, row[:7], strict=True)), "createdAtMs": row[7], "updatedAtMs": row[8]}
        for row in conn.execute(sql, args)
    ]


def full_task(conn: sqlite3.Connection, task_id: str) -> dict[str, Any] | None:
    """``{"tenant", "principal", "source", "version", "updatedAtMs", "task"}`` with the
    whole Task (history and artifacts, ProtoJSON), or ``None`` if unknown."""
    stored = tasks.load(conn, task_id)
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


def _where(where: TaskFilter) -> tuple[str, list[object]]:
    columns = (
        ("principal", where.principal),
        ("context_id", where.context_id),
        ("state", where.state),
        ("tenant", where.tenant),
    )
    used = [(column, value) for column, value in columns if value is not None]
    if not used:
        return "", []
    return "WHERE " + " AND ".join(f"{c} = ?" for c, _ in used), [v for _, v in used]


_INVARIANTS = (
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


def check(conn: sqlite3.Connection) -> list[str]:
    """Every problem found, one line each; empty when the store is sound.

    Checks SQLite's ``PRAGMA integrity_check``, then the store's invariants: every
    accepted claim has its Task, no journal record or origin outlives its Task, and
    every Task row decodes to a Task whose id, contextId and state match its columns.
    """
    problems = [
        f"integrity: {row[0]}"
        for row in conn.execute("PRAGMA integrity_check")
        if row[0] != "ok"
    ]
    if problems:
        return problems  # the tables cannot be trusted; stop here
    for name, sql in _INVARIANTS:
        problems += [f"{name}: {a} -> Task {b}" for a, b in conn.execute(sql)]
    for task_id, context_id, state in conn.execute(
        "SELECT task_id, context_id, state FROM tasks"
    ).fetchall():
        try:
            stored = tasks.load(conn, task_id)
        except Exception as exc:  # a row that does not decode is the finding
            problems.append(f"Task {task_id} does not decode: {exc}")
            continue
        assert stored is not None
        task = stored.task
        if (task.id, task.context_id, task.status.state.name) != (task_id, context_id, state):
            problems.append(f"Task {task_id}: its JSON disagrees with its columns")
    return problems


def backup(
    conn: sqlite3.Connection,
    destination: Path,
    progress: Callable[[int, int], None],
) -> int:
    """Copy the store into a new SQLite file through SQLite's online backup API.

    Args:
        destination: a path that does not exist yet; created with mode 0600.
        progress: called after each step with (pages copied, total pages).
    Returns:
        the number of pages copied.
    Raises:
        StoreAccessError: ``destination`` exists or cannot be written (a partial
            file is removed).
    """
    try:
        fd = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise StoreAccessError(f"cannot create {destination}: {exc.strerror or exc}") from None
    os.close(fd)
    total = 0

    def step(_status: int, remaining: int, pages: int) -> None:
        nonlocal total
        total = pages
        progress(pages - remaining, pages)

    try:
        target = sqlite3.connect(destination)
        try:
            conn.backup(target, pages=BACKUP_STEP_PAGES, progress=step)
        finally:
            target.close()
    except BaseException as exc:
        destination.unlink(missing_ok=True)
        if isinstance(exc, sqlite3.Error | OSError):
            raise StoreAccessError(f"backup to {destination} failed: {exc}") from None
        raise
    os.chmod(destination, 0o600)
    return total


def compact_now(conn: sqlite3.Connection, *, vacuum: bool) -> dict[str, Any]:
    """Apply the retention rules now (as a server does at startup), then optionally
    ``VACUUM`` to give the freed pages back to the filesystem.

    Returns ``{"removed": {table: rows}, "bytesBefore", "bytesAfter"}``.
    """
    before = _database_bytes(conn)
    conn.execute("BEGIN IMMEDIATE")
    try:
        report = compact(conn, time.time_ns() // 1_000_000)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    if vacuum:
        conn.execute("VACUUM")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return {
        "removed": attrs.asdict(report),
        "bytesBefore": before,
        "bytesAfter": _database_bytes(conn),
    }


def stats(conn: sqlite3.Connection, root: Path) -> dict[str, Any]:
    """Sizes and counts: schema version, file bytes, rows per table, Tasks by state
    and by principal, journal records by kind, deliveries by state."""

    def grouped(sql: str) -> dict[str, int]:
        return {str(key): int(count) for key, count in conn.execute(sql)}

    tables = [
        row[0]
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'"
            " AND name NOT LIKE 'sqlite_%' ORDER BY name"
        )
    ]
    files = {
        path.name: path.stat().st_size
        for path in sorted(root.glob(DATABASE_FILE_NAME + "*"))
        if path.is_file()
    }
    return {
        "storeRoot": str(root),
        "schemaVersion": current_version(conn),
        "files": files,
        "databaseBytes": _database_bytes(conn),
        "rows": {t: conn.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in tables},
        "tasksByState": grouped("SELECT state, COUNT(*) FROM tasks GROUP BY state"),
        "tasksByPrincipal": grouped(
            "SELECT CASE tenant WHEN '' THEN principal ELSE tenant || '/' || principal END,"
            " COUNT(*) FROM tasks GROUP BY tenant, principal"
        ),
        "journalByKind": grouped("SELECT kind, COUNT(*) FROM journal GROUP BY kind"),
        "deliveriesByState": grouped("SELECT state, COUNT(*) FROM deliveries GROUP BY state"),
    }


def _database_bytes(conn: sqlite3.Connection) -> int:
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    return int(pages) * int(size)

