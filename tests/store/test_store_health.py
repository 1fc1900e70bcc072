"""The store's own account of whether it can commit (design rule "Readiness tells the
truth"): a failed write is remembered with its reason, in words that say "the disk is
full" when it is, until a write commits again; a read-only transaction clears nothing;
the write probe commits only when the store has room to grow.

A full disk is SQLite's real SQLITE_FULL under ``PRAGMA max_page_count``
(``tests/store/faults.py``)."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

import outcome
import pytest

from taskplane.errors import StoreUnavailable
from taskplane.store.sqlite.database import Database, describe, probe
from tests.store.faults import DiskQuota, page_limited_connection, quota_connection

BIG = "x" * 200_000


def _put(value: str) -> object:
    def op(conn: sqlite3.Connection) -> None:
        conn.execute(
            "INSERT INTO meta (key, value) VALUES ('test', ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (value,),
        )

    return op


def _read(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT COUNT(*) FROM meta").fetchone()[0])


def test_a_failed_write_is_remembered_until_a_write_commits_again(tmp_path: Path) -> None:
    quota = DiskQuota()
    db = Database(tmp_path / "store", factory=quota_connection(quota))
    try:
        assert db.commit_failure is None
        quota.fill()
        (failed,) = db.run_batch([_put(BIG)])
        assert isinstance(failed, outcome.Error)
        assert isinstance(failed.error, StoreUnavailable)
        assert "is full (database or disk is full)" in str(failed.error)
        assert db.commit_failure is not None and "is full" in db.commit_failure
        (read,) = db.run_batch([_read])  # a read-only transaction commits, but wrote nothing
        assert isinstance(read, outcome.Value)
        assert db.commit_failure is not None
        (no_room,) = db.run_batch([lambda conn: probe(conn, 1, db.root)])
        assert isinstance(no_room, outcome.Error) and "room" in str(no_room.error)
        assert db.commit_failure is not None
        quota.free()
        (probed,) = db.run_batch([lambda conn: probe(conn, 2, db.root)])
        assert isinstance(probed, outcome.Value)
        assert db.commit_failure is None
    finally:
        db.close()


def test_a_full_disk_is_named_so_whatever_the_driver_says(tmp_path: Path) -> None:
    enospc = OSError(errno.ENOSPC, "No space left on device")
    assert (
        describe(enospc, tmp_path)
        == f"the disk holding {tmp_path} is full (No space left on device)"
    )
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorcode = sqlite3.SQLITE_FULL  # type: ignore[attr-defined]
    assert describe(full, None) == "the disk is full (database or disk is full)"
    other = sqlite3.OperationalError("disk I/O error")
    assert describe(other, tmp_path) == "disk I/O error"  # this test's disk has room


@pytest.mark.parametrize("value", ["small", BIG])
def test_writes_that_commit_leave_no_failure(tmp_path: Path, value: str) -> None:
    db = Database(tmp_path / "store")
    try:
        (done,) = db.run_batch([_put(value)])
        assert isinstance(done, outcome.Value) and db.commit_failure is None
    finally:
        db.close()


def test_opening_a_store_on_a_full_disk_says_the_disk_is_full(tmp_path: Path) -> None:
    """A new store that cannot grow past one page: migrating it fails with SQLITE_FULL,
    and the startup error says so and names the store root."""
    root = tmp_path / "store"
    with pytest.raises(StoreUnavailable) as refused:
        Database(root, factory=page_limited_connection(1))
    message = str(refused.value)
    assert f"cannot open the task store at {root}" in message
    assert f"the disk holding {root} is full" in message
