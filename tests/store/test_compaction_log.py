"""``store_compacted`` is a store event: on a SQLite store (compacted at startup) it
is logged under the store's logger, never the cluster's."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from taskplane.cluster.maintenance import compact_once
from tests.store.backends import open_sqlite_store
from tests.store.contract import NOW


async def test_a_sqlite_compaction_is_logged_under_the_stores_logger(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with open_sqlite_store(tmp_path) as store:
        await compact_once(store, NOW)
    [line] = [r for r in caplog.records if getattr(r, "event", "") == "store_compacted"]
    assert line.name == "taskplane.store"
