"""taskplane/durable_file.py: the one atomic, durable file write.

Credentials, agent transcripts and relay replies are all written through it: a
reader sees the old file or the new one, a file created once is never overwritten,
private files are 0600 whatever the umask, and no temporary file is left behind.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from taskplane.durable_file import create_file, make_private_dirs, replace_file


@pytest.fixture
def loose_umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_create_file_writes_once(tmp_path: Path, loose_umask: None) -> None:
    target = tmp_path / "reply.json"
    assert create_file(target, b"first") is True
    assert target.read_bytes() == b"first"
    assert _mode(target) == 0o644  # 0666 filtered by the umask, as open() does
    assert create_file(target, b"second") is False
    assert target.read_bytes() == b"first"  # never overwritten
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reply.json"]


def test_create_file_leaves_anything_at_the_name_alone(tmp_path: Path) -> None:
    dangling = tmp_path / "link"
    dangling.symlink_to(tmp_path / "nowhere")
    assert create_file(dangling, b"x") is False
    assert dangling.is_symlink() and not (tmp_path / "nowhere").exists()
    (tmp_path / "dir").mkdir()
    assert create_file(tmp_path / "dir", b"x") is False


def test_private_files_are_0600_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o277)  # would strip the owner's write bit
    try:
        assert create_file(tmp_path / "secret", b"s", private=True)
        replace_file(tmp_path / "transcript", b"t", private=True)
    finally:
        os.umask(old)
    assert _mode(tmp_path / "secret") == 0o600
    assert _mode(tmp_path / "transcript") == 0o600


def test_replace_file_replaces_atomically(tmp_path: Path) -> None:
    target = tmp_path / "transcript.json"
    replace_file(target, b"old", private=True)
    replace_file(target, b"new", private=True)
    assert target.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["transcript.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    target.mkdir()  # os.replace cannot put a file over a directory
    with pytest.raises(OSError):
        replace_file(target, b"x")
    assert target.is_dir()
    assert [p.name for p in tmp_path.iterdir()] == ["taken"]


def test_make_private_dirs_creates_only_what_is_missing_with_0700(
    tmp_path: Path, loose_umask: None
) -> None:
    (tmp_path / "a").mkdir(mode=0o755)
    make_private_dirs(tmp_path / "a" / "b" / "c")
    assert _mode(tmp_path / "a") == 0o755  # existed: left alone
    assert _mode(tmp_path / "a" / "b") == 0o700
    assert _mode(tmp_path / "a" / "b" / "c") == 0o700
