"""Backend factories for the store contract suite: each opens a running store.

A factory is an async context manager yielding a :class:`TaskStore` whose actor runs
for the duration of the block; leaving it stops the actor and closes the backend.
A new backend adds its factory here and a ``test_contract_<backend>.py`` module.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Literal

import trio

from taskplane.store.sqlite.actor import STORE_INBOX_SIZE, StoreRequest, run_store
from taskplane.store.sqlite.database import Database
from taskplane.store.sqlite.store import SqliteStore


@asynccontextmanager
async def open_sqlite_store(
    root: Path | Literal[":memory:"], *, in_thread: bool = True
) -> AsyncIterator[SqliteStore]:
    """The SQLite backend over ``root`` (a store root directory, or ``":memory:"``)."""
    db = await trio.to_thread.run_sync(partial(Database, root))
    tx, rx = trio.open_memory_channel[StoreRequest](STORE_INBOX_SIZE)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(run_store, db, rx, in_thread=in_thread))
            try:
                yield SqliteStore(tx, db)
            finally:
                nursery.cancel_scope.cancel()
    finally:
        tx.close()
        db.close()
