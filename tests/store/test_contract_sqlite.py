"""The store contract suite against the SQLite backend: a database file in a store
root, and an in-memory database."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from pathlib import Path

from taskplane.store.contract import TaskStore
from taskplane.store.sqlite.database import MEMORY
from tests.store.backends import open_sqlite_store
from tests.store.contract import TaskStoreContract


class TestSqliteFileStore(TaskStoreContract):
    def open_store(self, tmp_path: Path) -> AbstractAsyncContextManager[TaskStore]:
        return open_sqlite_store(tmp_path / "store")


class TestSqliteMemoryStore(TaskStoreContract):
    def open_store(self, tmp_path: Path) -> AbstractAsyncContextManager[TaskStore]:
        return open_sqlite_store(MEMORY)
