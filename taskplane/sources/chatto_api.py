"""A small ConnectRPC client for the Chatto source: unary calls as JSON over HTTP.

Every call is ``POST <CHATTO_URL>/api/connect/<package>.<Service>/<Method>`` with
``Content-Type: application/json``, ``Connect-Protocol-Version: 1`` and the bot's
``Authorization: Bearer`` key; the answer is the response message in protobuf JSON
(camel-case field names). A failed call is a Connect error body
``{"code": "not_found", "message": ...}`` with the HTTP status its code maps to.

How an answer is read (rule "Failure is visible": each is one exception type):

- ``resource_exhausted`` (HTTP ``429``): :class:`ChattoRateLimited`, wait
  ``Retry-After`` seconds (10 s when absent); nothing happened.
- ``not_found``: :class:`ChattoNotFound` (the normal absence signal).
- any other code that says the server refused before acting (``invalid_argument``,
  ``permission_denied``, ``unauthenticated``, ``failed_precondition``, ...):
  :class:`ChattoRejected`, a ``ProviderRejected`` (definitely not done).
- an answer over :data:`MAX_ANSWER_BYTES` (16 MiB, like the relay's): unread past
  it, :class:`ChattoUnavailable` naming the limit.
- ``unavailable``, ``internal``, ``unknown``, ``deadline_exceeded``, ``data_loss``,
  ``aborted``, ``canceled``, an answer that is not a Connect error or not JSON, or a
  transport error: :class:`ChattoUnavailable` (the outcome is unknown).
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from taskplane.actors.outbound import ProviderRejected
from taskplane.sources.bounded_body import MAX_ANSWER_BYTES, read_bounded
from taskplane.sources.rate_limit import header_wait

TIMEOUT_S = 30.0
"""Upper bound of one call, in seconds."""
DEFAULT_RATE_WAIT_S = 10.0
"""The wait after a rate limit that names none, in seconds."""
API_PACKAGE = "chatto.api.v1"
"""The protobuf package of the public client API."""

UNKNOWN_OUTCOME = frozenset(
    {"unavailable", "internal", "unknown", "deadline_exceeded", "data_loss", "aborted", "canceled"}
)
"""Connect codes after which the call may or may not have taken effect."""


class ChattoUnavailable(Exception):
    """The server is unavailable or its answer cannot be read: the outcome is unknown."""


class ChattoRejected(ProviderRejected):
    """A Connect error that says the call was refused: definitely not done.

    Attributes:
        code: the Connect code (``permission_denied``, ``invalid_argument``, ...).
    """

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


class ChattoNotFound(ChattoRejected):
    """``not_found``: the exact resource is absent (deleted, dismissed, never there)."""


class ChattoRateLimited(ChattoRejected):
    """``resource_exhausted``: wait ``wait_s`` seconds."""

    def __init__(self, message: str, wait_s: float) -> None:
        super().__init__(message, "resource_exhausted")
        self.wait_s = wait_s


def connect_url(base_url: str, service: str, method: str) -> str:
    """The URL of ``service``'s ``method`` (``service`` unqualified: ``ViewerService``)
    under the server at ``base_url``."""
    return f"{base_url.rstrip('/')}/api/connect/{API_PACKAGE}.{service}/{method}"


class ChattoApi:
    """Unary ConnectRPC calls against ``base_url`` (``CHATTO_URL``) with the bot's key."""

    def __init__(self, client: httpx.AsyncClient, base_url: str, token: str) -> None:
        self.client = client
        self.base_url = base_url
        self._headers = {
            "Authorization": f"Bearer {token}",
            "Connect-Protocol-Version": "1",
            "Content-Type": "application/json",
        }

    async def call(self, service: str, method: str, body: dict[str, Any]) -> dict[str, Any]:
        """One unary call; the decoded response message.

        Raises:
            ChattoRateLimited, ChattoNotFound, ChattoRejected, ChattoUnavailable.
        """
        url = connect_url(self.base_url, service, method)
        what = f"{service}/{method} at {url}"  # the URL tried; the key is only in a header
        try:
            async with self.client.stream(
                "POST",
                url,
                json=body,
                headers=self._headers,
            ) as response:
                data = await read_bounded(response, MAX_ANSWER_BYTES)
        except httpx.TransportError as exc:
            raise ChattoUnavailable(f"{what}: {exc!r}") from exc
        if data is None:
            raise ChattoUnavailable(f"{what}: the answer exceeds {MAX_ANSWER_BYTES} bytes")
        try:
            decoded = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise ChattoUnavailable(f"{what}: HTTP {response.status_code}, not JSON") from exc
        if response.status_code == 200 and isinstance(decoded, dict):
            return decoded
        raise connect_error(what, response, decoded)


def connect_error(what: str, response: httpx.Response, body: object) -> Exception:
    """The exception for a failed call: its Connect code decides (module docstring)."""
    code = body.get("code") if isinstance(body, dict) else None
    if not isinstance(code, str):
        return ChattoUnavailable(f"{what}: HTTP {response.status_code} without a Connect error")
    message = f"{what}: {code}: {body.get('message', '') if isinstance(body, dict) else ''}"
    if code == "resource_exhausted":
        wait = header_wait(response, "Retry-After")
        return ChattoRateLimited(message, DEFAULT_RATE_WAIT_S if wait is None else wait)
    if code == "not_found":
        return ChattoNotFound(message, code)
    if code in UNKNOWN_OUTCOME:
        return ChattoUnavailable(message)
    return ChattoRejected(message, code)
