"""A small Forgejo / Gitea REST client (``/api/v1``) for the notifications source.

Authentication is ``Authorization: token <FORGEJO_TOKEN>``. A ``429`` (a rate limit,
usually a proxy's) waits ``Retry-After`` (:class:`ForgejoRateLimited`: nothing
happened). Any other ``4xx`` is a definite refusal (:class:`ForgejoRejected`, a
``ProviderRejected``, with its ``status``); a ``5xx``, a body that is not JSON or a
transport error is an unknown outcome (:class:`ForgejoUnavailable`).
"""

from __future__ import annotations

from typing import Any

import httpx

from taskplane.actors.outbound import ProviderRejected
from taskplane.sources.rate_limit import header_wait

TIMEOUT_S = 30.0
DEFAULT_RATE_WAIT_S = 60.0


class ForgejoUnavailable(Exception):
    """A 5xx answer or a transport error: the outcome is unknown."""


class ForgejoRejected(ProviderRejected):
    """A 4xx answer: definitely not done."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"Forgejo answered {status}: {message}")
        self.status = status


class ForgejoRateLimited(ForgejoRejected):
    """HTTP 429: wait ``wait_s`` seconds."""

    def __init__(self, wait_s: float) -> None:
        super().__init__(429, f"rate limited for {wait_s:.0f} s")
        self.wait_s = wait_s


class ForgejoApi:
    """Requests against ``url`` (``FORGEJO_URL``) with ``token``."""

    def __init__(self, client: httpx.AsyncClient, url: str, token: str) -> None:
        self.client = client
        self.base_url = url.rstrip("/") + "/api/v1"
        self._headers = {"Authorization": f"token {token}", "Accept": "application/json"}

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        json: Any = None,
    ) -> httpx.Response:
        """One request; ``path`` is under ``/api/v1`` or an absolute URL of the API.

        Raises:
            ForgejoRateLimited, ForgejoRejected, ForgejoUnavailable.
        """
        url = path if path.startswith(("http://", "https://")) else self.base_url + path
        try:
            response = await self.client.request(
                method, url, params=params, json=json, headers=self._headers
            )
        except httpx.TransportError as exc:
            raise ForgejoUnavailable(f"{method} {url}: {exc!r}") from exc
        status = response.status_code
        if status < 300:
            return response
        if status == 429:
            wait = header_wait(response, "Retry-After")
            raise ForgejoRateLimited(DEFAULT_RATE_WAIT_S if wait is None else wait)
        if 400 <= status < 500:
            raise ForgejoRejected(status, _message(response))
        raise ForgejoUnavailable(f"{method} {url}: HTTP {status}")

    async def get_json(self, path: str, params: dict[str, str] | None = None) -> Any:
        """``GET`` and decode the JSON body.

        Raises:
            ForgejoRateLimited, ForgejoRejected, ForgejoUnavailable (also for a body
            that is not JSON).
        """
        response = await self.request("GET", path, params=params)
        try:
            return response.json()
        except ValueError as exc:
            raise ForgejoUnavailable(f"GET {path}: the answer is not JSON") from exc


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    return str(body.get("message", ""))[:200] if isinstance(body, dict) else ""
