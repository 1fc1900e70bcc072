"""Fixtures shared by the end-to-end tests (real ``taskplane`` processes)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.taskplane_proc import Spawner


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawner]:
    """Starts taskplane processes in ``tmp_path``; stops every one at teardown."""
    spawner = Spawner(tmp_path)
    try:
        yield spawner
    finally:
        spawner.close()
