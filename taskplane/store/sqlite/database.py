"""The SQLite connection of one store root, and the batch transaction it runs.

Blocking: every method here does file I/O and must run in a worker thread owned by
the store actor; nothing else touches the connection. Driver errors are translated to
taskplane errors here, at the backend boundary, and nowhere else.

Durability: WAL journal, ``synchronous=FULL`` (every COMMIT fsyncs the WAL), the root
directory 0700 and its files 0600.

Health (rule "Readiness tells the truth"): :attr:`Database.commit_failure` says why the
last write could not be made durable (disk full, I/O error) until a transaction that
wrote commits again; a failure on a full disk says "the disk is full" and names the
store root, whatever SQLite's own wording (it reports a full disk while opening as a
"disk I/O error").
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import outcome

from taskplane.errors import StoreUnavailable, TaskplaneError
from taskplane.store.sqlite.lock import StoreRootLock
from taskplane.store.sqlite.schema import migrate

log = logging.getLogger("taskplane.store")

DATABASE_FILE_NAME = "taskplane.sqlite3"
BUSY_TIMEOUT_MS = 5_000

Op = Callable[[sqlite3.Connection], Any]
"""A unit of store work: runs inside a transaction, returns a value or raises."""

ConnectionFactory = type[sqlite3.Connection]


FULL_DISK_BYTES = 1 << 20
"""Free space under which a failing write is reported as a full disk, in bytes."""
WRITE_PROBE_SQL = (
    "INSERT INTO meta (key, value) VALUES ('write_probe', ?) "
    "ON CONFLICT(key) DO UPDATE SET value = excluded.value"
)
"""The smallest write that must commit: one ``meta`` row, rewritten (see :func:`probe`)."""

MEMORY = ":memory:"
"""The ``root`` of a database that lives in memory only (no file, no lock; tests)."""


class Database:
    """The open store: root lock, connection, and the group-commit transaction.

    Args:
        root: the store root directory (created 0700 if missing), or :data:`MEMORY`.
        factory: the ``sqlite3.Connection`` subclass to open (tests pass one that
            injects I/O faults; see ``tests/store/faults.py``).
    Raises:
        StoreLocked: another process holds the root.
        StoreVersionError: the database was written by a newer taskplane.
        StoreUnavailable: the database cannot be opened or migrated, or the disk
            holding the root is full (the message says so and names the root).
        OSError: the root cannot be created or locked.

    Attributes:
        commit_failure: why the last write failed to commit (``None`` while writes
            commit): set by a batch whose BEGIN, statements or COMMIT failed in the
            driver, cleared by the next batch that wrote and committed.
    """

    def __init__(
        self, root: Path | Literal[":memory:"], *, factory: ConnectionFactory = sqlite3.Connection
    ) -> None:
        self.transactions = 0
        self.operations = 0
        self.largest_batch = 0
        self.commit_failure: str | None = None
        if root == MEMORY:
            self.root: Path | None = None
            self.lock: StoreRootLock | None = None
            self.path: str = MEMORY
            self.conn = _connect(MEMORY, factory)
            return
        assert isinstance(root, Path)
        try:
            root.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(root, 0o700)
            self.root = root
            self.lock = StoreRootLock(root)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            raise StoreUnavailable(
                f"cannot open the task store at {root}: {describe(exc, root)}"
            ) from exc
        try:
            path = root / DATABASE_FILE_NAME
            self.path = str(path)
            old_umask = os.umask(0o077)  # the -wal and -shm files are created 0600 too
            try:
                self.conn = _connect(path, factory, root)
            finally:
                os.umask(old_umask)
            os.chmod(path, 0o600)
        except BaseException:
            self.lock.release()
            raise

    def run_batch(self, ops: Sequence[Op]) -> list[outcome.Outcome[Any]]:
        """Run ``ops`` in one transaction with one COMMIT (one fsync): group commit.

        Each op runs inside its own SAVEPOINT, so an op that raises is rolled back
        alone and the others still commit. If BEGIN or COMMIT fails, every op fails
        with :class:`StoreUnavailable` and nothing is recorded.

        Returns:
            one ``outcome.Value`` or ``outcome.Error`` per op, in order. Errors are
            :class:`TaskplaneError` (the op's own verdict) or ``StoreUnavailable``.
        """
        conn = self.conn
        self.transactions += 1
        self.operations += len(ops)
        self.largest_batch = max(self.largest_batch, len(ops))
        changes = conn.total_changes
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            return [outcome.Error(self._unavailable("begin", exc)) for _ in ops]
        results: list[outcome.Outcome[Any]] = []
        try:
            for op in ops:
                conn.execute("SAVEPOINT op")
                try:
                    value = op(conn)
                except Exception as exc:
                    if isinstance(exc, sqlite3.Error) and not conn.in_transaction:
                        # SQLite rolled the whole transaction back itself (SQLITE_FULL,
                        # SQLITE_IOERR...): every op of the batch is lost, not just this one.
                        raise _BatchAborted(exc) from exc
                    conn.execute("ROLLBACK TO op")
                    conn.execute("RELEASE op")
                    results.append(outcome.Error(self._as_store_error(exc)))
                else:
                    conn.execute("RELEASE op")
                    results.append(outcome.Value(value))
            conn.execute("COMMIT")
        except _BatchAborted as aborted:
            self._rollback()
            return [outcome.Error(self._unavailable("write", aborted.error)) for _ in ops]
        except sqlite3.Error as exc:
            self._rollback()
            return [outcome.Error(self._unavailable("commit", exc)) for _ in ops]
        except BaseException:
            self._rollback()
            raise
        wrote = conn.total_changes != changes
        if wrote and self.commit_failure is not None and not _failed_to_write(results):
            log.info(
                "store commits again",
                extra={"event": "store_recovered", "after": self.commit_failure},
            )
            self.commit_failure = None
        return results

    def close(self) -> None:
        """Close the connection and release the root lock (idempotent)."""
        try:
            self.conn.close()
        finally:
            if self.lock is not None:
                self.lock.release()

    def _unavailable(self, stage: str, exc: sqlite3.Error) -> StoreUnavailable:
        """``exc`` (the driver's) as the 503 of every op it failed; remembered as
        :attr:`commit_failure`."""
        reason = describe(exc, self.root)
        self.commit_failure = f"the task store could not {stage}: {reason}"
        log.error(
            "store %s failed: %s",
            stage,
            reason,
            extra={"event": "store_write_failed", "stage": stage},
        )
        return StoreUnavailable(
            f"the task store could not {stage} ({reason}); nothing was recorded"
        )

    def _as_store_error(self, exc: Exception) -> Exception:
        if isinstance(exc, TaskplaneError):
            return exc
        if isinstance(exc, sqlite3.Error):
            return self._unavailable("write", exc)
        return exc

    def _rollback(self) -> None:
        try:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
        except sqlite3.Error:
            log.exception("rollback failed", extra={"event": "store_rollback_failed"})


def probe(conn: sqlite3.Connection, now_ms: int, root: Path | None) -> None:
    """The write probe op: the store has room to grow again, then one ``meta`` row is
    rewritten, so that its batch writes and must commit (a read-only transaction
    commits even on a full disk, and a small rewrite fits in pages the store already
    has: room is checked first).

    Raises:
        StoreUnavailable: less than :data:`FULL_DISK_BYTES` of room, on the filesystem
            holding ``root`` or under SQLite's ``max_page_count``.
    """
    room = room_bytes(conn, root)
    if room < FULL_DISK_BYTES:
        raise StoreUnavailable(f"the task store has {room} bytes of room left")
    conn.execute(WRITE_PROBE_SQL, (str(now_ms),))


def room_bytes(conn: sqlite3.Connection, root: Path | None) -> int:
    """How many bytes the database can still grow by: the free pages inside it plus
    the pages ``max_page_count`` still allows, at most the free space of the
    filesystem holding ``root`` (unbounded for an in-memory database)."""

    def pragma(name: str) -> int:
        return int(conn.execute(f"PRAGMA {name}").fetchone()[0])

    page = pragma("page_size")
    room = (pragma("max_page_count") - pragma("page_count") + pragma("freelist_count")) * page
    if root is not None:
        stat = os.statvfs(root)
        room = min(room, stat.f_bavail * stat.f_frsize + pragma("freelist_count") * page)
    return room


def describe(exc: BaseException, root: Path | None) -> str:
    """A driver or OS error in words: ``"the disk holding <root> is full (...)"`` when
    SQLite said SQLITE_FULL, the OS said ENOSPC, or the filesystem holding ``root`` has
    less than :data:`FULL_DISK_BYTES` free; else the error's own text."""
    code = getattr(exc, "sqlite_errorcode", None)
    full = (code is not None and code & 0xFF == sqlite3.SQLITE_FULL) or (
        isinstance(exc, OSError) and exc.errno == errno.ENOSPC
    )
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    if root is not None and not full:
        try:
            stat = os.statvfs(root)
        except OSError:
            pass
        else:
            full = stat.f_bavail * stat.f_frsize < FULL_DISK_BYTES
    if full:
        where = f" holding {root}" if root is not None else ""
        return f"the disk{where} is full ({text})"
    return text


def _failed_to_write(results: Sequence[outcome.Outcome[Any]]) -> bool:
    return any(
        isinstance(r, outcome.Error) and isinstance(r.error, StoreUnavailable) for r in results
    )


def _connect(
    path: Path | str, factory: ConnectionFactory, root: Path | None = None
) -> sqlite3.Connection:
    """Open and migrate the database at ``path`` (WAL, ``synchronous=FULL``).

    Raises:
        StoreVersionError: written by a newer taskplane.
        StoreUnavailable: SQLite refused to open or migrate it (the driver's error
            is translated here, once).
    """
    try:
        conn = sqlite3.connect(
            path,
            isolation_level=None,
            check_same_thread=False,
            factory=factory,
            timeout=BUSY_TIMEOUT_MS / 1000,
        )
    except sqlite3.Error as exc:
        raise StoreUnavailable(
            f"cannot open the task store at {path}: {describe(exc, root)}"
        ) from exc
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        migrate(conn, where=str(path))
    except sqlite3.Error as exc:
        conn.close()
        raise StoreUnavailable(
            f"cannot open the task store at {path}: {describe(exc, root)}"
        ) from exc
    except BaseException:
        conn.close()
        raise
    return conn


class _BatchAborted(Exception):
    def __init__(self, error: sqlite3.Error) -> None:
        super().__init__(str(error))
        self.error = error
