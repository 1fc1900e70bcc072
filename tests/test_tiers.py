"""The test tiers are assigned in one place and enforced (testing rulebook, rule 2).

:mod:`tests.support.tiers` marks a test ``slow`` by folder and by fixture; a quick
test that starts a process or listens on a socket fails.
"""

from __future__ import annotations

import ast
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.tiers import (
    SLOW_DIRECTORIES,
    SLOW_FIXTURES,
    TESTS_ROOT,
    QuickTierViolation,
    is_slow,
    quick_tier_guard,
)


@pytest.mark.parametrize("folder", SLOW_DIRECTORIES)
def test_every_test_of_a_slow_folder_is_slow(folder: str) -> None:
    assert is_slow(TESTS_ROOT / folder / "test_x.py", ["tmp_path"], marked_slow=False)


@pytest.mark.parametrize("fixture", sorted(SLOW_FIXTURES))
def test_a_test_using_a_process_or_socket_fixture_is_slow(fixture: str) -> None:
    assert is_slow(TESTS_ROOT / "http" / "test_x.py", ["tmp_path", fixture], marked_slow=False)


def test_an_in_process_test_is_quick_unless_marked() -> None:
    path = TESTS_ROOT / "actors" / "test_x.py"
    assert not is_slow(path, ["store_root", "autojump_clock", "client"], marked_slow=False)
    assert is_slow(path, ["store_root"], marked_slow=True)
    assert not is_slow(TESTS_ROOT / "test_e2e_like_name.py", [], marked_slow=False)
    assert not is_slow(Path("/elsewhere/e2e/test_x.py"), [], marked_slow=False)


def test_this_test_runs_in_the_quick_tier(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("slow") is None


def conftest_fixtures() -> set[str]:
    """Names of the fixtures the ``conftest.py`` files under ``tests/`` define."""
    names: set[str] = set()
    for path in TESTS_ROOT.rglob("conftest.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
                "fixture" in ast.unparse(d) for d in node.decorator_list
            ):
                names.add(node.name)
    return names


def test_the_slow_fixtures_exist() -> None:
    assert conftest_fixtures() >= SLOW_FIXTURES


def test_a_quick_test_may_not_start_a_process() -> None:
    with quick_tier_guard("tests/x.py::t"), pytest.raises(QuickTierViolation) as caught:
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert "tests/x.py::t started a process" in str(caught.value)
    assert "@pytest.mark.slow" in str(caught.value)


async def test_a_quick_test_may_not_run_a_process_through_trio() -> None:
    import trio

    with quick_tier_guard("t"), pytest.raises(QuickTierViolation):
        await trio.run_process([sys.executable, "-c", "pass"])


def test_a_quick_test_may_not_listen_on_a_socket() -> None:
    with socket.socket() as sock, quick_tier_guard("t"):
        sock.bind(("127.0.0.1", 0))
        with pytest.raises(QuickTierViolation, match="listened on a socket"):
            sock.listen()


def test_the_guard_is_lifted_after_the_block() -> None:
    listen, popen = socket.socket.listen, subprocess.Popen.__init__
    with quick_tier_guard("t"):
        assert socket.socket.listen is not listen
        assert subprocess.Popen.__init__ is not popen
    assert socket.socket.listen is listen
    assert subprocess.Popen.__init__ is popen
