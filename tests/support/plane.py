"""A task plane for tests: the test manifest and principals, a plane over a fresh store
root, its HTTP app, and in-process clients.

- Principals: ``alpha`` (:data:`ALPHA_TOKEN`) and ``beta`` (:data:`BETA_TOKEN`).
- :func:`open_test_plane`: the plane over a store root with :data:`MANIFEST`.
- :func:`make_app`: the quart-trio app over a plane, with :func:`credentials` and a card.
- :func:`in_process_client`: an httpx client calling that app in process (httpx's ASGI
  transport buffers whole responses: serve the app on a socket for SSE).
- :func:`auth`, :func:`send_body`: request headers and a ``SendMessageRequest`` body.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import httpx

from taskplane.actors.plane import TaskPlane
from taskplane.app import PlaneOptions, open_plane
from taskplane.bridge.manifest import parse_manifest
from taskplane.bridge.settings import AgentSettings
from taskplane.extensions import ELICITATION_URI, OUTFITTER_TASK_URI
from taskplane.http.auth import Credentials
from taskplane.http.card import agent_card_json
from taskplane.http.handlers import Handlers
from taskplane.server import edge_app

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


def make_app(
    plane: TaskPlane, blocking_timeout_s: float = BLOCKING_TIMEOUT_S, *, compat03: bool = False
) -> Any:
    """The HTTP app over ``plane`` with the test credentials and card (``compat03``:
    ``TASKPLANE_A2A_COMPAT=0.3``)."""
    card = agent_card_json(
        public_url=PUBLIC_URL, name="test-agent", description="tests", version="1.2.3"
    )
    return edge_app(
        Handlers(plane, blocking_timeout_s=blocking_timeout_s),
        credentials(),
        card,
        supported_extensions=(ELICITATION_URI, OUTFITTER_TASK_URI),
        compat03=compat03,
    )


def in_process_client(app: Any, token: str = ALPHA_TOKEN) -> httpx.AsyncClient:
    """An httpx client that calls ``app`` in-process as the holder of ``token``."""
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://test", headers=auth(token)
    )
