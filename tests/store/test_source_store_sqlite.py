"""The source store contract suite against the SQLite backend (a real store file)."""

from __future__ import annotations

from pathlib import Path

from tests.store.backends import open_sqlite_stores
from tests.store.source_contract import SourceStoreContract, Stores


class TestSqliteSourceStore(SourceStoreContract):
    def open_stores(self, tmp_path: Path) -> Stores:
        return open_sqlite_stores(tmp_path)
