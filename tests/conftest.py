"""Shared fixtures: a running task plane in a temporary store, in-process and on a socket.

- ``plane``: the actors (store, intake, wake, owners) over a fresh store root.
- ``app``: the quart-trio app bound to ``plane``, with two principals (alpha, beta).
- ``client`` / ``beta``: httpx clients for alpha / beta, talking to ``app`` in-process
  (httpx's ASGI transport buffers whole responses: use ``live`` for SSE).
- ``live``: the same app served by hypercorn on 127.0.0.1:<free port>, and an httpx
  client for alpha on it.
- ``fake_openai``: the scripted OpenAI-compatible server on 127.0.0.1:<free port>,
  and its base URL.
- ``pg_cluster``: the session's throwaway PostgreSQL server (on a unix socket).

The helpers behind them live in :mod:`tests.support` (a conftest is never imported);
the test tiers (``slow``) are assigned here, see :mod:`tests.support.tiers`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from taskplane.actors.plane import TaskPlane
from taskplane.app import PlaneOptions
from tests.bridge.fake_openai import FakeOpenAI, serve_fake
from tests.support.pg import INSTALL_HINT, Cluster, find_bindir, start_cluster
from tests.support.plane import (
    ALPHA_TOKEN,
    BETA_TOKEN,
    auth,
    in_process_client,
    make_app,
    open_test_plane,
)

pytest_plugins = ["tests.support.tiers"]


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def plane_options() -> PlaneOptions:
    """Override in a module to run the plane with other options (clock, faults...)."""
    return PlaneOptions()


@pytest.fixture
async def plane(store_root: Path, plane_options: PlaneOptions) -> AsyncIterator[TaskPlane]:
    async with open_test_plane(store_root, plane_options) as running:
        yield running


@pytest.fixture
def app(plane: TaskPlane) -> Any:
    return make_app(plane)


@pytest.fixture
async def client(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with in_process_client(app, ALPHA_TOKEN) as c:
        yield c


@pytest.fixture
async def beta(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with in_process_client(app, BETA_TOKEN) as c:
        yield c


@pytest.fixture
async def live(app: Any, nursery: trio.Nursery) -> AsyncIterator[httpx.AsyncClient]:
    from hypercorn.config import Config
    from hypercorn.trio import serve

    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.graceful_timeout = 1.0
    stop = trio.Event()
    binds = await nursery.start(
        lambda task_status: serve(app, config, shutdown_trigger=stop.wait, task_status=task_status)
    )
    async with httpx.AsyncClient(base_url=binds[0], headers=auth(ALPHA_TOKEN), timeout=10.0) as c:
        yield c
    stop.set()


@pytest.fixture
async def fake_openai(nursery: trio.Nursery) -> AsyncIterator[tuple[FakeOpenAI, str]]:
    """The scripted OpenAI-compatible server, served until the test ends, and its
    base URL (``http://127.0.0.1:<port>/v1``)."""
    server = FakeOpenAI()
    stop = trio.Event()
    url = await nursery.start(serve_fake, server, stop)
    yield server, url
    stop.set()


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """The session's PostgreSQL cluster, started on first use (slow tier). Missing
    server binaries fail the test, never skip it: CI installs PostgreSQL."""
    if find_bindir() is None:
        pytest.fail(INSTALL_HINT, pytrace=False)
    with start_cluster() as cluster:
        yield cluster
