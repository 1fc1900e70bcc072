"""The store contract suite against the PostgreSQL backend: a fresh database of the
session's throwaway cluster per test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest

from taskplane.store.contract import TaskStore
from tests.store.backends import open_pg_store
from tests.store.contract import TaskStoreContract
from tests.support.pg import Cluster


class TestPostgresStore(TaskStoreContract):
    cluster: Cluster

    @pytest.fixture(autouse=True)
    def use_cluster(self, request: pytest.FixtureRequest, pg_cluster: Cluster) -> None:
        request.instance.cluster = pg_cluster  # for tests that call open_store themselves

    @pytest.fixture
    async def store(self, pg_cluster: Cluster) -> AsyncIterator[TaskStore]:
        async with open_pg_store(pg_cluster.fresh_store_url()) as store:
            yield store

    def open_store(self, tmp_path: Path) -> AbstractAsyncContextManager[TaskStore]:
        return open_pg_store(self.cluster.fresh_store_url())
