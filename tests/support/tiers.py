"""The two test tiers, assigned in one place: the quick tier and ``slow``.

A test is ``slow`` when it lives in a slow directory (:data:`SLOW_DIRECTORIES`: real
``taskplane`` processes and drills), when it uses a fixture that starts a process or
serves on a real socket (:data:`SLOW_FIXTURES`), or when it carries
``@pytest.mark.slow`` itself (a module that starts processes without such a fixture says
``pytestmark = pytest.mark.slow``). Everything else is quick: ``./run test -m "not slow"``
runs it, ``./run test`` runs both tiers.

The classification is enforced, not trusted: while a quick test runs (setup, call and
teardown), starting a process or listening on a socket raises :class:`QuickTierViolation`
naming the test, in every run, so a misplaced test fails in CI as well as locally.

This module is a pytest plugin; the root ``conftest.py`` registers it.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Collection, Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn
from unittest import mock

import pytest

TESTS_ROOT = Path(__file__).resolve().parent.parent
SLOW = "slow"

SLOW_DIRECTORIES = ("e2e", "drills")
"""Folders under ``tests/`` whose every test is slow: real processes, crash drills."""

SLOW_FIXTURES = frozenset({"spawn", "live", "fake_openai", "pg_cluster"})
"""Fixtures that start a ``taskplane`` process (``spawn``), serve on a real socket
(``live``: hypercorn on 127.0.0.1; ``fake_openai``: the scripted OpenAI server) or
start a PostgreSQL server (``pg_cluster``: :mod:`tests.support.pg`)."""


class QuickTierViolation(RuntimeError):
    """A quick test started a process or listened on a socket: mark it ``slow`` (or use
    a fixture of :data:`SLOW_FIXTURES`)."""


def is_slow(path: Path, fixturenames: Collection[str], marked_slow: bool) -> bool:
    """Whether a test at ``path`` (a file under ``tests/``) using ``fixturenames`` is in
    the slow tier; ``marked_slow`` says it carries ``@pytest.mark.slow`` already."""
    if marked_slow or not SLOW_FIXTURES.isdisjoint(fixturenames):
        return True
    try:
        parts = path.resolve().relative_to(TESTS_ROOT).parts
    except ValueError:
        return False
    return len(parts) > 1 and parts[0] in SLOW_DIRECTORIES


@contextmanager
def quick_tier_guard(test: str) -> Iterator[None]:
    """While the block runs, ``subprocess.Popen`` (which ``trio.run_process`` uses too)
    and ``socket.listen`` raise :class:`QuickTierViolation` naming ``test``."""

    def refuse(what: str) -> NoReturn:
        raise QuickTierViolation(
            f"{test} {what}, which only a slow test may do: mark it "
            f"@pytest.mark.{SLOW} or use one of the fixtures {sorted(SLOW_FIXTURES)}"
        )

    def no_process(*args: Any, **kwargs: Any) -> NoReturn:
        refuse("started a process")

    def no_listen(*args: Any, **kwargs: Any) -> NoReturn:
        refuse("listened on a socket")

    with (
        mock.patch.object(subprocess.Popen, "__init__", no_process),
        mock.patch.object(socket.socket, "listen", no_listen),
    ):
        yield


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Add the ``slow`` mark to every test :func:`is_slow` puts in the slow tier."""
    for item in items:
        fixturenames = getattr(item, "fixturenames", ())
        marked = item.get_closest_marker(SLOW) is not None
        if is_slow(item.path, fixturenames, marked) and not marked:
            item.add_marker(pytest.mark.slow)


def _guarded(item: pytest.Item) -> Generator[None, object, object]:
    if item.get_closest_marker(SLOW) is not None:
        return (yield)
    with quick_tier_guard(item.nodeid):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _guarded(item))
