"""A small Mattermost REST v4 client for the Mattermost source, and the WebSocket
authentication.

Mattermost answers a refusal with a JSON error body (``{"id": ..., "message": ...,
"status_code": ...}``). A ``429`` (rate limit) waits ``X-Ratelimit-Reset`` seconds, or
``Retry-After`` (:class:`MattermostRateLimited`: nothing happened). Any other ``4xx``
is a definite refusal (:class:`MattermostRejected`, a ``ProviderRejected``); a
``5xx``, a body that is not JSON or a transport error is an unknown outcome
(:class:`MattermostUnavailable`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx
from trio_websocket import WebSocketConnection

from taskplane.actors.outbound import ProviderRejected
from taskplane.sources.rate_limit import header_wait

TIMEOUT_S = 30.0
DEFAULT_RATE_WAIT_S = 10.0


class MattermostUnavailable(Exception):
    """A 5xx answer or a transport error: the outcome is unknown."""


class MattermostRejected(ProviderRejected):
    """A 4xx answer or a refused WebSocket authentication: definitely not done."""


class MattermostRateLimited(MattermostRejected):
    """HTTP 429: wait ``wait_s`` seconds."""

    def __init__(self, wait_s: float) -> None:
        super().__init__(f"Mattermost rate limit: retry after {wait_s:.0f} s")
        self.wait_s = wait_s


def websocket_url(base_url: str) -> str:
    """The WebSocket endpoint of the server at ``base_url`` (``ws``/``wss``)."""
    base = base_url.rstrip("/")
    scheme, rest = base.split("://", 1)
    return f"{'wss' if scheme == 'https' else 'ws'}://{rest}/api/v4/websocket"


class MattermostApi:
    """REST v4 calls against ``base_url`` (``MATTERMOST_URL``) with the bot's token."""

    def __init__(self, client: httpx.AsyncClient, base_url: str, token: str) -> None:
        self.client = client
        self.base_url = base_url.rstrip("/") + "/api/v4"
        self._headers = {"Authorization": f"Bearer {token}"}

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str | int] | None = None,
    ) -> Any:
        """One call (``path`` under ``/api/v4``, ``params`` its query); the decoded
        JSON body.

        Raises:
            MattermostRateLimited, MattermostRejected, MattermostUnavailable.
        """
        url = self.base_url + path
        try:
            response = await self.client.request(
                method, url, json=body, params=dict(params or {}), headers=self._headers
            )
        except httpx.TransportError as exc:
            raise MattermostUnavailable(f"{method} {path}: {exc!r}") from exc
        status = response.status_code
        if status == 429:
            raise MattermostRateLimited(rate_limit_wait(response))
        if 400 <= status < 500:
            raise MattermostRejected(f"{method} {path}: HTTP {status} {_error_id(response)}")
        if status >= 300:
            raise MattermostUnavailable(f"{method} {path}: HTTP {status}")
        try:
            return response.json()
        except ValueError as exc:
            raise MattermostUnavailable(f"{method} {path}: the answer is not JSON") from exc


def rate_limit_wait(response: httpx.Response) -> float:
    """Seconds to wait after a ``429``: ``X-Ratelimit-Reset`` (seconds until the
    window resets), else ``Retry-After``, else 10 s; clamped to 1 s .. 1 h."""
    wait = header_wait(response, "X-Ratelimit-Reset", "Retry-After")
    return DEFAULT_RATE_WAIT_S if wait is None else wait


async def authenticate(ws: WebSocketConnection, token: str) -> None:
    """Send the ``authentication_challenge`` and wait for its ``OK`` reply (frames
    before it, such as ``hello``, are skipped).

    Raises:
        MattermostRejected: the server answered ``FAIL``.
        ConnectionClosed: the connection closed first.
    """
    challenge = {"seq": 1, "action": "authentication_challenge", "data": {"token": token}}
    await ws.send_message(json.dumps(challenge))
    while True:
        try:
            frame = json.loads(await ws.get_message())
        except ValueError:
            continue
        if isinstance(frame, dict) and frame.get("seq_reply") == 1:
            if frame.get("status") != "OK":
                error = frame.get("error") or {}
                raise MattermostRejected(f"WebSocket authentication: {error.get('id', 'FAIL')}")
            return


def _error_id(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return ""
    return str(body.get("id", "")) if isinstance(body, dict) else ""
