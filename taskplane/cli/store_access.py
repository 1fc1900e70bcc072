"""The command line's one door to a stopped server's store (``tasks`` and ``store``).

The backend's maintenance operations are reached through the composition root
(:func:`taskplane.app.open_offline_store`); this module only turns their failures into
one clear line each. The store root's lock is held for the whole command (design rule
"Only one process may open a store root"), so while a server runs, the command fails
at once and names the server's pid.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from taskplane.app import OfflineStore, offline_lock_holder, open_offline_store
from taskplane.errors import StoreLocked, TaskplaneError


class StoreAccessError(Exception):
    """The store cannot be opened or used; the message says why and what to do."""


@contextmanager
def open_store(root: Path) -> Iterator[OfflineStore]:
    """The locked store at ``root`` for the duration of the block.

    Raises:
        StoreAccessError: there is no store at ``root``, a running server holds its
            lock (the message names the pid), it cannot be opened, or an operation
            inside the block failed with an OS or store error.
    """
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
