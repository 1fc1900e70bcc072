"""The source store contract suite against the PostgreSQL backend: a fresh database of
the session's throwaway cluster per test."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.store.backends import open_pg_stores
from tests.store.source_contract import SourceStoreContract, Stores
from tests.support.pg import Cluster


class TestPostgresSourceStore(SourceStoreContract):
    cluster: Cluster

    @pytest.fixture(autouse=True)
    def use_cluster(self, request: pytest.FixtureRequest, pg_cluster: Cluster) -> None:
        request.instance.cluster = pg_cluster

    def open_stores(self, tmp_path: Path) -> Stores:
        return open_pg_stores(self.cluster.fresh_store_url())
