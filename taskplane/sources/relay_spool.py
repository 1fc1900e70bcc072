"""The relay's filesystem operations (blocking; run them with ``trio.to_thread``).

Reading an inbox entry never follows a symbolic link and never opens anything but a
regular file, and reads at most its limit plus one byte; setting an entry aside
never replaces one set aside before; a reply file is written atomically, once; a
receipt is replaced atomically and never moves back a state.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from taskplane.durable_file import create_file, replace_file


def write_once(directory: Path, name: str, data: bytes) -> None:
    """Atomically create ``directory/name`` with ``data`` unless it exists (blocking).

    :func:`taskplane.durable_file.create_file`: temporary file, fsync, hard link to
    the final name (fails if it exists: then nothing is written again), fsync of the
    directory.
    """
    create_file(directory / name, data)


class NotARegularFile(OSError):
    """An inbox entry that is not a regular file, or a file over the size limit."""


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISLNK, "a symbolic link (never followed)"),
    (stat.S_ISFIFO, "a fifo"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _check_regular(mode: int) -> None:
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
        raise NotARegularFile(f"the inbox entry is {kind}; only regular files are read")


def read_entry(path: Path, limit_bytes: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit_bytes`` (blocking).

    Never follows a symbolic link and never opens a directory, fifo, socket or device
    for reading (``lstat`` first, then ``O_NOFOLLOW | O_NONBLOCK`` and ``fstat`` of
    what was opened, so a swap in between is caught). Reads at most
    ``limit_bytes + 1`` bytes.

    Raises:
        NotARegularFile: not a regular file, or larger than ``limit_bytes``.
        FileNotFoundError: gone (taken by someone else).
        OSError: unreadable (permissions, I/O error).
    """
    _check_regular(os.lstat(path).st_mode)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    with open(os.open(path, flags), "rb") as f:
        info = os.fstat(f.fileno())
        _check_regular(info.st_mode)
        if info.st_size > limit_bytes:
            raise NotARegularFile(
                f"the file of {info.st_size} bytes exceeds the limit of {limit_bytes} bytes"
            )
        data = f.read(limit_bytes + 1)
    if len(data) > limit_bytes:
        raise NotARegularFile(f"the file exceeds the limit of {limit_bytes} bytes")
    return data


def move_aside(path: Path, directory: Path) -> Path:
    """Rename the entry ``path`` itself into ``directory`` (blocking); returns the new
    path. An earlier entry of the same name is kept: the new one gets a ``.N``
    suffix, so nothing set aside is ever replaced.

    Raises:
        FileNotFoundError: ``path`` is gone.
        OSError: the rename failed.
    """
    for n in range(1000):
        target = directory / (path.name if n == 0 else f"{path.name}.{n}")
        if not os.path.lexists(target):
            os.rename(path, target)
            return target
    raise FileExistsError(f"{directory} holds 1000 entries named {path.name}")


def describe(exc: OSError) -> str:
    """What went wrong with an entry, for its evidence."""
    if isinstance(exc, NotARegularFile) or not exc.strerror:
        return str(exc)
    if exc.errno == errno.ELOOP:
        return "the inbox entry is a symbolic link (never followed)"
    return f"the inbox entry cannot be read: {exc.strerror}"


RECEIPT_STATES = ("handled", "replied")
"""A message's receipt states, in order: accepted into a Task, then answered."""


def write_receipt(directory: Path, name: str, record: Mapping[str, object]) -> None:
    """Atomically set the receipt ``directory/name`` to ``record`` (blocking), never
    moving it back: a ``handled`` record does not replace a ``replied`` one.

    Raises:
        OSError: the file could not be written.
    """
    path = directory / name
    try:
        current = json.loads(path.read_bytes())
    except (FileNotFoundError, ValueError):
        current = None
    order = {state: n for n, state in enumerate(RECEIPT_STATES)}
    if isinstance(current, dict) and order.get(str(current.get("state")), -1) > order.get(
        str(record.get("state")), -1
    ):
        return
    replace_file(path, json.dumps(record, sort_keys=True, indent=1).encode())
