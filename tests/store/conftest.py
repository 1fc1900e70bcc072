"""Store test fixtures: one throwaway PostgreSQL cluster per test session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.pg import INSTALL_HINT, Cluster, find_bindir, start_cluster


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """The session's PostgreSQL cluster, started on first use. Missing binaries fail
    the test (never a skip): CI installs PostgreSQL."""
    if find_bindir() is None:
        pytest.fail(INSTALL_HINT, pytrace=False)
    with start_cluster() as cluster:
        yield cluster
