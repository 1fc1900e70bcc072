"""The exclusive, process-lifetime lock on a store root.

Design rules "Resident-agent bridge": only one process may open a store root at a
time; here the lock is present from the start. The lock is an
``fcntl.flock`` on ``<root>/LOCK``; the holder writes its pid into the file so that a
second process can name it. The kernel drops the lock when the process dies, so a
crashed server never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from taskplane.errors import StoreLocked

LOCK_FILE_NAME = "LOCK"


class StoreRootLock:
    """An exclusive lock on one store root, held until :meth:`release`.

    Blocking: the constructor makes a few syscalls (open, flock, write); call it from a
    worker thread or at startup.

    Raises:
        StoreLocked: another process holds the lock; the message names the root and
            the holder's pid.
        OSError: the lock file cannot be created.
    """

    def __init__(self, root: Path) -> None:
        self.path = root / LOCK_FILE_NAME
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise StoreLocked(
                f"the store root {root} is in use by another taskplane process "
                f"(pid {holder}); only one process may open a store root at a time. "
                "Stop it, or set CHANNELS_TASK_STORE_PATH to another directory."
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.fsync(fd)
        self._fd: int | None = fd

    def release(self) -> None:
        """Drop the lock (idempotent)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def _read_pid(fd: int) -> str:
    try:
        return os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
    except OSError:
        return "unknown"
