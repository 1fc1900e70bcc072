"""Shared fixtures: a running task plane in a temporary store, in-process and on a socket.

- ``plane``: the actors (store, intake, wake, owners) over a fresh store root.
- ``app``: the quart-trio app bound to ``plane``, with two principals (alpha, beta).
- ``client`` / ``beta``: httpx clients for alpha / beta, talking to ``app`` in-process
  (httpx's ASGI transport buffers whole responses: use ``live`` for SSE).
- ``live``: the same app served by hypercorn on 127.0.0.1:<free port>, and an httpx
  client for alpha on it.
- ``fake_openai``: the scripted OpenAI-compatible server on 127.0.0.1:<free port>,
  and its base URL.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from taskplane.actors.plane import TaskPlane
from taskplane.app import PlaneOptions, open_plane
from taskplane.bridge.manifest import parse_manifest
from taskplane.bridge.settings import AgentSettings
from taskplane.extensions import ELICITATION_URI, OUTFITTER_TASK_URI
from taskplane.http.auth import Credentials
from taskplane.http.card import agent_card_json
from taskplane.http.handlers import Handlers
from taskplane.server import edge_app
from tests.bridge.fake_openai import FakeOpenAI, serve_fake

ALPHA_TOKEN = "alpha-token-0123456789"
BETA_TOKEN = "beta-token-0123456789"
PUBLIC_URL = "http://127.0.0.1:8788"
BLOCKING_TIMEOUT_S = 5.0
MANIFEST = {
    "workflows": [
        {"id": "ship", "outputs": {"pull-request": {"from": "open-pr", "type": "pull-request"}}}
    ]
}


def credentials() -> Credentials:
    """Two principals: ``alpha`` and ``beta``."""
    return Credentials.from_json(
        {
            "credentials": [
                {"token": ALPHA_TOKEN, "principal": "alpha"},
                {"token": BETA_TOKEN, "principal": "beta"},
            ]
        },
        source="tests",
    )


def auth(token: str = ALPHA_TOKEN) -> dict[str, str]:
    """Request headers for ``token``."""
    return {"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}


def send_body(text: str, message_id: str, **extra: Any) -> dict[str, Any]:
    """A SendMessageRequest body for a user text message (``extra`` joins the message,
    except ``configuration``)."""
    configuration = extra.pop("configuration", None)
    body: dict[str, Any] = {
        "message": {
            "messageId": message_id,
            "role": "ROLE_USER",
            "parts": [{"text": text}],
            **extra,
        }
    }
    if configuration is not None:
        body["configuration"] = configuration
    return body


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


def open_test_plane(
    store_root: Path, options: PlaneOptions | None = None, agent: AgentSettings | None = None
) -> AbstractAsyncContextManager[TaskPlane]:
    """The plane over ``store_root`` with the test manifest (``pull-request`` output);
    ``agent`` sets the concurrency and turn deadline (the runtime is ``options``')."""
    outputs = parse_manifest(MANIFEST, None, where="tests")
    return open_plane(
        store_root,
        public_url=PUBLIC_URL,
        outputs=outputs,
        options=options or PlaneOptions(),
        agent=agent,
    )


def make_app(plane: TaskPlane, blocking_timeout_s: float = BLOCKING_TIMEOUT_S) -> Any:
    """The HTTP app over ``plane`` with the test credentials and card."""
    card = agent_card_json(
        public_url=PUBLIC_URL, name="test-agent", description="tests", version="1.2.3"
    )
    return edge_app(
        Handlers(plane, blocking_timeout_s=blocking_timeout_s),
        credentials(),
        card,
        supported_extensions=(ELICITATION_URI, OUTFITTER_TASK_URI),
    )


@pytest.fixture
def app(plane: TaskPlane) -> Any:
    return make_app(plane)


def in_process_client(app: Any, token: str = ALPHA_TOKEN) -> httpx.AsyncClient:
    """An httpx client that calls ``app`` in-process as the holder of ``token``."""
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://test", headers=auth(token)
    )


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
