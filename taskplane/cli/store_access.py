"""The command line's one door to a store (``tasks``, ``store`` and ``deliveries``).

The backend's maintenance operations are reached through the composition root
(:func:`taskplane.app.open_offline_store`, :func:`taskplane.app.open_postgres_maintenance`);
this module only turns their failures into one clear line each. It imports the
composition root inside the functions that open a store, so a command that opens none
never pays for importing the plane.

- SQLite: the store root's lock is held for the whole command (design rule "Only one
  process may open a store root"), so while a server runs, the command fails at once
  and names the server's pid.
- PostgreSQL: no lock is taken, so the commands work while a node runs: reads on one
  snapshot, writes in the store's own transactions (see
  :mod:`taskplane.store.postgres.maintenance`). Messages name the database without
  its password.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from taskplane.cli.options import StoreLocation
from taskplane.errors import StoreLocked, TaskplaneError

if TYPE_CHECKING:
    from taskplane.app import OfflineStore, PgMaintenance


class StoreAccessError(Exception):
    """The store cannot be opened or used; the message says why and what to do."""


@contextmanager
def open_store(location: StoreLocation) -> Iterator[OfflineStore | PgMaintenance]:
    """The store at ``location`` for the duration of the block: the locked SQLite
    store of its root, or the PostgreSQL store of its URL (no lock).

    Raises:
        StoreAccessError: see :func:`open_sqlite` and :func:`open_postgres`.
    """
    if location.url is None:
        with open_sqlite(location.root) as sqlite_store:
            yield sqlite_store
    else:
        with open_postgres(location.url) as pg_store:
            yield pg_store


@contextmanager
def open_sqlite(root: Path) -> Iterator[OfflineStore]:
    """The locked SQLite store at ``root`` for the duration of the block.

    Raises:
        StoreAccessError: there is no store at ``root``, a running server holds its
            lock (the message names the pid), it cannot be opened, or an operation
            inside the block failed with an OS or store error.
    """
    from taskplane.app import offline_lock_holder, open_offline_store

    try:
        with open_offline_store(root) as store:
            yield store
    except FileNotFoundError:
        raise StoreAccessError(
            f"there is no store at {root} (CHANNELS_TASK_STORE_PATH / --store)"
        ) from None
    except StoreLocked:
        raise StoreAccessError(
            f"the store at {root} is in use by a running taskplane server "
            f"(pid {offline_lock_holder(root)}); this command opens the store directly, "
            "so stop the server first"
        ) from None
    except (OSError, TaskplaneError) as exc:
        raise StoreAccessError(str(exc)) from None


@contextmanager
def open_postgres(url: str) -> Iterator[PgMaintenance]:
    """The PostgreSQL store at ``url`` for the duration of the block (no lock: a
    running node keeps running).

    Raises:
        StoreAccessError: the database holds no taskplane store, its schema is not
            this taskplane's, the server cannot be reached, or an operation inside
            the block failed; the message names the database without its password.
    """
    from taskplane.app import open_postgres_maintenance, postgres_location

    try:
        with open_postgres_maintenance(url) as store:
            yield store
    except FileNotFoundError as exc:
        raise StoreAccessError(f"{exc} (TASKPLANE_STORE_URL / --store-url)") from None
    except TaskplaneError as exc:
        where = postgres_location(url)
        message = str(exc)
        raise StoreAccessError(
            message if where in message else f"{message} (store: {where})"
        ) from None
