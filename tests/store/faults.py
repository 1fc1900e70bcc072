"""Fault injection in the store's connection layer (not a mock of the store).

``faulty_connection(faults)`` builds a ``sqlite3.Connection`` subclass that the real
:class:`~taskplane.store.sqlite.database.Database` opens; while ``faults`` says so, it makes
SQLite statements fail the way a failing disk does.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import attrs


@attrs.define
class Faults:
    """What to break. ``commit``: COMMIT raises "disk I/O error"; ``writes``: every
    INSERT/UPDATE raises "database or disk is full"; ``locked``: BEGIN raises
    "database is locked"."""

    commit: bool = False
    writes: bool = False
    locked: bool = False
    raised: int = 0

    def check(self, sql: str) -> None:
        head = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
        error: str | None = None
        if self.commit and head == "COMMIT":
            error = "disk I/O error"
        elif self.writes and head in ("INSERT", "UPDATE"):
            error = "database or disk is full"
        elif self.locked and head == "BEGIN":
            error = "database is locked"
        if error is not None:
            self.raised += 1
            raise sqlite3.OperationalError(error)


def faulty_connection(faults: Faults) -> type[sqlite3.Connection]:
    """A connection class whose ``execute`` consults ``faults`` first."""

    class FaultyConnection(sqlite3.Connection):
        def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
            faults.check(sql)
            return super().execute(sql, parameters)

    return FaultyConnection


def page_limited_connection(max_pages: int) -> type[sqlite3.Connection]:
    """A connection whose database may not grow past ``max_pages`` pages: a real
    SQLITE_FULL ("database or disk is full") once the file would grow."""

    class PageLimitedConnection(sqlite3.Connection):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            super().execute(f"PRAGMA max_page_count = {int(max_pages)}")

    return PageLimitedConnection


@attrs.define
class DiskQuota:
    """A disk the test fills and frees, through SQLite's own limit (no patch of the
    store): :meth:`fill` caps the database at its current size (``PRAGMA
    max_page_count``), so the next write that needs a page fails with a real
    SQLITE_FULL ("database or disk is full"), as on a full filesystem; :meth:`free`
    lifts the cap. Each change takes effect before the connection's next statement,
    on the store's own thread."""

    pending: int | None = None
    filled: int = 0

    def fill(self) -> None:
        self.pending = 0

    def free(self) -> None:
        self.pending = 0xFFFFFFFE  # SQLite's default max_page_count


def quota_connection(quota: DiskQuota) -> type[sqlite3.Connection]:
    """A connection whose growth ``quota`` controls (see :class:`DiskQuota`)."""

    class QuotaConnection(sqlite3.Connection):
        def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
            if quota.pending is not None:
                limit = quota.pending
                quota.pending = None
                if limit == 0:
                    limit = int(super().execute("PRAGMA page_count").fetchone()[0])
                    quota.filled = limit
                super().execute(f"PRAGMA max_page_count = {int(limit)}")
            return super().execute(sql, parameters)

    return QuotaConnection
