"""Offline maintenance of a SQLite store: read Tasks, check, back up, compact, measure.

For the command line's ``tasks`` and ``store`` commands, which run while no server
uses the store. :func:`open_offline` takes the root lock for the whole block (design
rule "Only one process may open a store root"), so it fails at once while a server
holds the root. The exception is :func:`online_backup`: it only reads, through a
second, read-only connection and SQLite's online backup, so it works while a server
runs (WAL readers never block the writer). Blocking I/O throughout: a short-lived CLI
process calls these directly, never the trio server.
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

from taskplane.errors import StoreUnavailable
from taskplane.store import inspection
from taskplane.store.sqlite import tasks
from taskplane.store.sqlite.compaction import compact
from taskplane.store.sqlite.database import DATABASE_FILE_NAME, Database, describe
from taskplane.store.sqlite.lock import LOCK_FILE_NAME
from taskplane.store.sqlite.schema import current_version

BACKUP_STEP_PAGES = 256
"""Pages copied per step of an online backup (the progress bar moves per step)."""


@contextmanager
def open_offline(root: Path) -> Iterator[OfflineStore]:
    """Lock and open the existing store at ``root`` for the duration of the block.

    Raises:
        FileNotFoundError: ``root`` holds no database (nothing is created).
        StoreLocked: a running server holds the root's lock.
        StoreVersionError: the database was written by a newer taskplane.
        StoreUnavailable, OSError: the database cannot be opened.
    """
    if not (root / DATABASE_FILE_NAME).is_file():
        raise FileNotFoundError(f"{root} holds no {DATABASE_FILE_NAME}")
    db = Database(root)
    try:
        yield OfflineStore(db.conn, root)
    finally:
        db.close()


class BackupDestinationError(Exception):
    """The backup's destination is the problem (it exists, its directory is missing or
    not writable, its disk is full); the message names it."""


def online_backup(root: Path, destination: Path, progress: Callable[[int, int], None]) -> int:
    """Copy the store at ``root`` into the new file ``destination`` (mode 0600), whether
    or not a server is running on it: the copy is made through a second, read-only
    connection in one step of SQLite's online backup, so it is one consistent
    snapshot (WAL content included) and a running server's writes are neither blocked
    nor seen half-way. No lock is taken.

    Args:
        progress: called with (pages copied, total pages) once the copy is made.
    Returns:
        the number of pages copied.
    Raises:
        FileNotFoundError: ``root`` holds no database.
        BackupDestinationError: ``destination`` exists or cannot be created or written
            (the message names it and says why, "the disk ... is full" included).
        StoreUnavailable: the store cannot be read.
    """
    path = root / DATABASE_FILE_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{root} holds no {DATABASE_FILE_NAME}")
    try:
        source = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise StoreUnavailable(f"cannot read the task store at {path}: {exc}") from None
    try:
        return _backup(source, destination, progress, step_pages=-1)
    finally:
        source.close()


def lock_holder(root: Path) -> str:
    """The pid written by the process that holds ``root``'s lock, or ``unknown``."""
    try:
        return (root / LOCK_FILE_NAME).read_text().strip() or "unknown"
    except OSError:
        return "unknown"


def _select_tasks(
    conn: sqlite3.Connection, where: dict[str, str | None], *, limit: int | None = None
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


def _full_task(conn: sqlite3.Connection, task_id: str) -> dict[str, Any] | None:
    """See :func:`taskplane.store.inspection.task_detail`."""
    return inspection.task_detail(tasks.load(conn, task_id))


def _where(where: dict[str, str | None]) -> tuple[str, list[object]]:
    used = [(column, value) for column, value in where.items() if value is not None]
    if not used:
        return "", []
    return "WHERE " + " AND ".join(f"{c} = ?" for c, _ in used), [v for _, v in used]


def _check(conn: sqlite3.Connection) -> list[str]:
    """Every problem found, one line each; empty when the store is sound.

    Checks SQLite's ``PRAGMA integrity_check``, then the store's invariants: every
    accepted claim has its Task, no journal record or origin outlives its Task, and
    every Task row decodes to a Task whose id, contextId and state match its columns.
    """
    problems = [
        f"integrity: {row[0]}" for row in conn.execute("PRAGMA integrity_check") if row[0] != "ok"
    ]
    if problems:
        return problems  # the tables cannot be trusted; stop here
    return problems + inspection.invariant_problems(
        lambda sql: conn.execute(sql).fetchall(),
        lambda task_id: tasks.load(conn, task_id),
    )


def _backup(
    conn: sqlite3.Connection,
    destination: Path,
    progress: Callable[[int, int], None],
    *,
    step_pages: int = BACKUP_STEP_PAGES,
) -> int:
    """Copy the store into a new SQLite file through SQLite's online backup API.

    Args:
        destination: a path that does not exist yet; created with mode 0600.
        progress: called after each step with (pages copied, total pages).
        step_pages: pages per step (-1: all in one step, one read transaction).
    Returns:
        the number of pages copied.
    Raises:
        BackupDestinationError: ``destination`` exists or cannot be created, or the
            copy failed (the message names ``destination`` and the reason, "the disk
            ... is full" included); a partial file is removed.
    """
    try:
        fd = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise BackupDestinationError(
            f"cannot create the backup file {destination}: "
            f"{describe(exc, _existing_parent(destination))}"
        ) from None
    os.close(fd)
    total = 0

    def step(_status: int, remaining: int, pages: int) -> None:
        nonlocal total
        total = pages
        progress(pages - remaining, pages)

    try:
        target = sqlite3.connect(destination)
        try:
            conn.backup(target, pages=step_pages, progress=step)
        finally:
            target.close()
    except BaseException as exc:
        destination.unlink(missing_ok=True)
        if isinstance(exc, sqlite3.Error):
            raise BackupDestinationError(
                f"the backup to {destination} failed: {describe(exc, destination.parent)}"
            ) from None
        raise
    os.chmod(destination, 0o600)
    return total


def _existing_parent(path: Path) -> Path | None:
    """The nearest directory above ``path`` that exists (for free-space checks)."""
    for parent in path.parents:
        if parent.is_dir():
            return parent
    return None


def _compact_now(conn: sqlite3.Connection, *, vacuum: bool) -> dict[str, Any]:
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


def _stats(conn: sqlite3.Connection, root: Path) -> dict[str, Any]:
    """Sizes and counts: schema version, file bytes, rows per table, Tasks by state
    and by principal, journal records by kind, deliveries by state."""

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
        **inspection.grouped_counts(lambda sql: conn.execute(sql).fetchall()),
    }


def _database_bytes(conn: sqlite3.Connection) -> int:
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    return int(pages) * int(size)


@attrs.frozen
class OfflineStore:
    """The maintenance view of one locked store root (see :func:`open_offline`).

    Attributes:
        conn: the connection (autocommit mode; only this process uses it).
        root: the store root directory.
    """

    conn: sqlite3.Connection
    root: Path

    def select_tasks(
        self,
        *,
        principal: str | None = None,
        context_id: str | None = None,
        state: str | None = None,
        tenant: str | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """Summaries of the matching Tasks, newest status first (``None`` matches
        all); see :func:`_select_tasks` for the keys."""
        where = {"principal": principal, "context_id": context_id, "state": state}
        return _select_tasks(self.conn, {**where, "tenant": tenant}, limit=limit)

    def full_task(self, task_id: str) -> dict[str, Any] | None:
        """One Task in full with its owner, or ``None``; see :func:`_full_task`."""
        return _full_task(self.conn, task_id)

    def check(self) -> list[str]:
        """Integrity and invariant problems, one line each; see :func:`_check`."""
        return _check(self.conn)

    def compact(self, *, vacuum: bool) -> dict[str, Any]:
        """Retention now, then optionally VACUUM; see :func:`_compact_now`."""
        return _compact_now(self.conn, vacuum=vacuum)

    def stats(self) -> dict[str, Any]:
        """Sizes and counts; see :func:`_stats`."""
        return _stats(self.conn, self.root)
