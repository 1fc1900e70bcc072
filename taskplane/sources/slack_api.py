"""A small Slack Web API client: ``auth.test``, ``apps.connections.open``,
``chat.postMessage``, ``conversations.replies`` and ``reactions.add``.

Slack answers ``200`` with ``{"ok": false, "error": ...}`` for a refused call: that is
a platform error, a definite refusal (:class:`SlackRejected`, a ``ProviderRejected``).
A ``429`` waits ``Retry-After`` (:class:`SlackRateLimited`, also definite: nothing
happened). A ``5xx`` or a transport error is an unknown outcome
(:class:`SlackUnavailable`).
"""

from __future__ import annotations

from typing import Any

import httpx

from taskplane.actors.outbound import ProviderRejected

DEFAULT_API_URL = "https://slack.com/api"
TIMEOUT_S = 30.0


class SlackUnavailable(Exception):
    """A 5xx answer or a transport error: the outcome is unknown."""


class SlackRejected(ProviderRejected):
    """A platform error (``ok: false``) or a 4xx: definitely not done.

    Attributes:
        error: the platform error code (e.g. ``already_reacted``), or ``""``.
    """

    def __init__(self, message: str, error: str = "") -> None:
        super().__init__(message)
        self.error = error


class SlackRateLimited(SlackRejected):
    """HTTP 429: wait ``wait_s`` seconds."""

    def __init__(self, wait_s: float) -> None:
        super().__init__(f"Slack rate limit: retry after {wait_s:.0f} s")
        self.wait_s = wait_s


class SlackApi:
    """Web API calls against ``base_url`` (``SLACK_API_URL``)."""

    def __init__(self, client: httpx.AsyncClient, base_url: str) -> None:
        self.client = client
        self.base_url = base_url.rstrip("/")

    async def call(
        self,
        method: str,
        token: str,
        *,
        body: dict[str, Any] | None = None,
        params: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """``POST`` (JSON ``body``) or ``GET`` (``params``) one method; the decoded body.

        Raises:
            SlackRateLimited, SlackRejected, SlackUnavailable: see the module docstring.
        """
        url = f"{self.base_url}/{method}"
        headers = {"Authorization": f"Bearer {token}"}
        try:
            if params is not None:
                response = await self.client.get(url, params=params, headers=headers)
            else:
                response = await self.client.post(url, json=body or {}, headers=headers)
        except httpx.TransportError as exc:
            raise SlackUnavailable(f"{method}: {exc!r}") from exc
        if response.status_code == 429:
            raw = response.headers.get("Retry-After", "")
            raise SlackRateLimited(max(1.0, float(raw)) if raw.strip().isdigit() else 30.0)
        if 400 <= response.status_code < 500:
            raise SlackRejected(f"{method}: HTTP {response.status_code}")
        if response.status_code >= 300:
            raise SlackUnavailable(f"{method}: HTTP {response.status_code}")
        try:
            data: dict[str, Any] = response.json()
        except ValueError as exc:
            raise SlackUnavailable(f"{method}: the answer is not JSON") from exc
        if not data.get("ok"):
            error = str(data.get("error", "unknown_error"))
            raise SlackRejected(f"{method}: {error}", error)
        return data
