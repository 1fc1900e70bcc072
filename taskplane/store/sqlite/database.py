"""The SQLite connection of one store root, and the batch transaction it runs.

Blocking: every method here does file I/O and must run in a worker thread owned by
the store actor; nothing else touches the connection. Driver errors are translated to
taskplane errors here, at the backend boundary, and nowhere else.

Durability: WAL journal, ``synchronous=FULL`` (every COMMIT fsyncs the WAL), the root
directory 0700 and its files 0600.
"""

from __future__ import annotations

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
        StoreUnavailable: the database cannot be opened or migrated.
        OSError: the root cannot be created or locked.
    """

    def __init__(
        self, root: Path | Literal[":memory:"], *, factory: ConnectionFactory = sqlite3.Connection
    ) -> None:
        self.transactions = 0
        self.operations = 0
        self.largest_batch = 0
        if root == MEMORY:
            self.root: Path | None = None
            self.lock: StoreRootLock | None = None
            self.path: str = MEMORY
            self.conn = _connect(MEMORY, factory)
            return
        assert isinstance(root, Path)
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(root, 0o700)
        self.root = root
        self.lock = StoreRootLock(root)
        try:
            path = root / DATABASE_FILE_NAME
            self.path = str(path)
            old_umask = os.umask(0o077)  # the -wal and -shm files are created 0600 too
            try:
                self.conn = _connect(path, factory)
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
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            return [outcome.Error(_unavailable("begin", exc)) for _ in ops]
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
                    results.append(outcome.Error(_as_store_error(exc)))
                else:
                    conn.execute("RELEASE op")
                    results.append(outcome.Value(value))
            conn.execute("COMMIT")
        except _BatchAborted as aborted:
            self._rollback()
            return [outcome.Error(_unavailable("write", aborted.error)) for _ in ops]
        except sqlite3.Error as exc:
            self._rollback()
            return [outcome.Error(_unavailable("commit", exc)) for _ in ops]
        except BaseException:
            self._rollback()
            raise
        return results

    def close(self) -> None:
        """Close the connection and release the root lock (idempotent)."""
        try:
            self.conn.close()
        finally:
            if self.lock is not None:
                self.lock.release()

    def _rollback(self) -> None:
        try:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
        except sqlite3.Error:
            log.exception("rollback failed", extra={"event": "store_rollback_failed"})


def _connect(path: Path | str, factory: ConnectionFactory) -> sqlite3.Connection:
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
        raise StoreUnavailable(f"cannot open the task store at {path}: {exc}") from exc
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        migrate(conn, where=str(path))
    except sqlite3.Error as exc:
        conn.close()
        raise StoreUnavailable(f"cannot open the task store at {path}: {exc}") from exc
    except BaseException:
        conn.close()
        raise
    return conn


class _BatchAborted(Exception):
    def __init__(self, error: sqlite3.Error) -> None:
        super().__init__(str(error))
        self.error = error


def _as_store_error(exc: Exception) -> Exception:
    if isinstance(exc, TaskplaneError):
        return exc
    if isinstance(exc, sqlite3.Error):
        return _unavailable("write", exc)
    return exc


def _unavailable(stage: str, exc: sqlite3.Error) -> StoreUnavailable:
    log.error(
        "store %s failed: %s", stage, exc, extra={"event": "store_write_failed", "stage": stage}
    )
    return StoreUnavailable(f"the task store could not {stage} ({exc}); nothing was recorded")
