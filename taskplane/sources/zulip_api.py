"""A small Zulip REST client for the Zulip source: HTTP Basic with the bot's email and
API key, form-encoded parameters (lists and objects JSON-encoded, as Zulip expects).

Zulip answers ``{"result": "success", ...}`` or ``{"result": "error", "msg": ...,
"code": ...}``. A ``429`` (``RATE_LIMIT_HIT``) waits ``Retry-After`` (or the body's
``retry-after``; :class:`ZulipRateLimited`, nothing happened). An error with code
``BAD_EVENT_QUEUE_ID`` is :class:`QueueGone` (register a new queue). Any other
``4xx`` or error result is a definite refusal (:class:`ZulipRejected`, a
``ProviderRejected``, with its ``code``); a ``5xx``, a body that is not JSON or a
transport error is an unknown outcome (:class:`ZulipUnavailable`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx

from taskplane.actors.outbound import ProviderRejected
from taskplane.sources.rate_limit import clamp_wait

TIMEOUT_S = 30.0
LONG_POLL_S = 120.0
"""Read timeout of ``GET /events`` (Zulip holds it up to about 90 s, then answers a
heartbeat)."""
DEFAULT_RATE_WAIT_S = 10.0


class ZulipUnavailable(Exception):
    """A 5xx answer or a transport error: the outcome is unknown."""


class ZulipRejected(ProviderRejected):
    """An error result: definitely not done. ``code`` is Zulip's error code."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class ZulipRateLimited(ZulipRejected):
    """HTTP 429: wait ``wait_s`` seconds."""

    def __init__(self, wait_s: float) -> None:
        super().__init__(f"Zulip rate limit: retry after {wait_s:.0f} s", "RATE_LIMIT_HIT")
        self.wait_s = wait_s


class QueueGone(ZulipRejected):
    """The event queue expired or is unknown (``BAD_EVENT_QUEUE_ID``)."""


class ZulipApi:
    """Calls against ``site`` (``ZULIP_SITE``) as ``email`` with ``api_key``."""

    def __init__(self, client: httpx.AsyncClient, site: str, email: str, api_key: str) -> None:
        self.client = client
        self.base_url = site.rstrip("/") + "/api/v1"
        self._auth = httpx.BasicAuth(email, api_key)

    async def call(
        self,
        method: str,
        path: str,
        params: Mapping[str, object] | None = None,
        *,
        timeout_s: float = TIMEOUT_S,
    ) -> dict[str, Any]:
        """One call (``path`` under ``/api/v1``); the decoded success body. ``GET``
        sends ``params`` in the query, others as a form.

        Raises:
            QueueGone, ZulipRateLimited, ZulipRejected, ZulipUnavailable.
        """
        encoded = {k: _encode(v) for k, v in (params or {}).items()}
        url = self.base_url + path
        query, form = (encoded, None) if method == "GET" else (None, encoded)
        try:
            response = await self.client.request(
                method, url, params=query, data=form, auth=self._auth, timeout=timeout_s
            )
        except httpx.TransportError as exc:
            raise ZulipUnavailable(f"{method} {path}: {exc!r}") from exc
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code == 429:
            raise ZulipRateLimited(rate_limit_wait(response, body))
        if response.status_code >= 500 or not isinstance(body, dict):
            raise ZulipUnavailable(f"{method} {path}: HTTP {response.status_code}")
        if response.status_code >= 400 or body.get("result") != "success":
            code = str(body.get("code", ""))
            text = f"{method} {path}: {code or response.status_code} {body.get('msg', '')}"
            raise (QueueGone if code == "BAD_EVENT_QUEUE_ID" else ZulipRejected)(text, code)
        return body


def rate_limit_wait(response: httpx.Response, body: object) -> float:
    """Seconds to wait after a ``429``: ``Retry-After``, else the body's
    ``retry-after``, else 10 s; clamped to 1 s .. 1 h."""
    raw: object = response.headers.get("Retry-After")
    if raw is None and isinstance(body, dict):
        raw = body.get("retry-after")
    try:
        wait = float(str(raw)) if raw is not None else DEFAULT_RATE_WAIT_S
    except ValueError:
        wait = DEFAULT_RATE_WAIT_S
    return clamp_wait(wait)


def _encode(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)
