"""Durable atomic file writes: a reader sees the old file or the new one, never a torn
one, and the new one survives a crash once the call returns.

Every write goes the same way: the data is written in full to a fresh hidden
temporary file beside the target (``.<name>.<16 hex>.tmp``, created exclusively),
fsynced, then given the target's name (:func:`create_file`: a hard link, which fails
if the name is taken, so an existing file is never overwritten; :func:`replace_file`:
a rename over the old file), and the directory is fsynced so the new name is durable
too. The temporary file is removed in every case.

A *private* file gets mode 0600 whatever the umask (credentials, agent transcripts);
otherwise the mode is 0666 filtered by the umask, as for ``open()``.

Blocking I/O: call these at startup or through ``trio.to_thread.run_sync``, never on
the event loop (code rule "Blocking I/O off the loop"). This module imports nothing
from the package (a leaf).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700


def create_file(path: Path, data: bytes, *, private: bool = False) -> bool:
    """Atomically create ``path`` holding ``data``, unless something is there already.

    Args:
        path: the file to create; its directory must exist.
        data: the whole content.
        private: mode 0600 whatever the umask (else 0666 filtered by the umask).

    Returns:
        ``True``: created and durable. ``False``: ``path`` already existed (a file, a
        directory or a symbolic link, even a dangling one), or appeared meanwhile;
        nothing was changed.

    Raises:
        OSError: the file could not be written, synced or linked (permissions, disk
            full, a filesystem without hard links); ``path`` was not created.
    """
    if os.path.lexists(path):
        return False
    temporary = _temporary_path(path)
    try:
        _write_new(temporary, data, private)
        try:
            os.link(temporary, path)
        except FileExistsError:
            return False
    finally:
        temporary.unlink(missing_ok=True)
    fsync_directory(path.parent)
    return True


def replace_file(path: Path, data: bytes, *, private: bool = False) -> None:
    """Atomically replace (or create) ``path`` with ``data``.

    Args:
        path: the file to write; its directory must exist.
        data: the whole content.
        private: mode 0600 whatever the umask (else 0666 filtered by the umask).

    Raises:
        OSError: the file could not be written, synced or renamed; the old file (if
            any) is then unchanged.
    """
    temporary = _temporary_path(path)
    try:
        _write_new(temporary, data, private)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    fsync_directory(path.parent)


def make_private_dirs(directory: Path) -> None:
    """Create ``directory`` and its missing parents with mode 0700; directories that
    exist already (or appear meanwhile) keep their mode.

    Raises:
        OSError: a directory could not be created.
    """
    missing: list[Path] = []
    current = directory
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for created in reversed(missing):
        try:
            created.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            continue  # created concurrently: leave its mode to whoever made it
        os.chmod(created, PRIVATE_DIR_MODE)  # mkdir's mode is filtered by the umask


def fsync_directory(directory: Path) -> None:
    """fsync ``directory``, so that a name just linked or renamed in it is durable.

    Raises:
        OSError: the directory could not be opened or synced.
    """
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _temporary_path(target: Path) -> Path:
    return target.with_name(f".{target.name}.{secrets.token_hex(8)}.tmp")


def _write_new(path: Path, data: bytes, private: bool) -> None:
    """Create ``path`` exclusively, write all of ``data`` and fsync it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o666)
    try:
        if private:
            os.fchmod(fd, PRIVATE_FILE_MODE)  # the umask may have removed owner bits
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
