"""A small GitHub REST client for the notifications source: bearer token, the JSON
media type, and rate limits turned into a wait instead of a retry loop.

A ``403`` or ``429`` that carries ``Retry-After``, or ``X-RateLimit-Remaining: 0``
with ``X-RateLimit-Reset``, raises :class:`RateLimited` with the seconds to wait
(at least 1 s, at most 1 h). Any other ``4xx`` is a definite refusal
(:class:`GitHubRejected`, a ``ProviderRejected``); a ``5xx`` or a transport error is
an unknown outcome (:class:`GitHubUnavailable`).
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from taskplane.actors.outbound import ProviderRejected
from taskplane.sources.rate_limit import clamp_wait, header_wait

DEFAULT_API_URL = "https://api.github.com"
API_VERSION = "2022-11-28"
TIMEOUT_S = 30.0


class GitHubUnavailable(Exception):
    """A 5xx answer or a transport error: the outcome of a mutation is unknown."""


class GitHubRejected(ProviderRejected):
    """A 4xx answer (other than a rate limit): the request was definitely refused."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"GitHub answered {status}: {message}")
        self.status = status


class RateLimited(GitHubRejected):
    """Rate limited: nothing happened; wait ``wait_s`` seconds before any request."""

    def __init__(self, status: int, wait_s: float) -> None:
        super().__init__(status, f"rate limited for {wait_s:.0f} s")
        self.wait_s = wait_s


class GitHubApi:
    """Requests against ``base_url`` (``GITHUB_API_URL``) with ``token``."""

    def __init__(self, client: httpx.AsyncClient, base_url: str, token: str) -> None:
        self.client = client
        self.base_url = base_url.rstrip("/")
        self._headers = {
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": API_VERSION,
            "User-Agent": "taskplane",
        }

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        json: Any = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        """One request; ``path`` is relative to the API base or an absolute API URL.

        Returns the response for 2xx and 304.

        Raises:
            RateLimited, GitHubRejected, GitHubUnavailable: see the module docstring.
        """
        url = path if path.startswith(("http://", "https://")) else self.base_url + path
        try:
            response = await self.client.request(
                method, url, params=params, json=json, headers={**self._headers, **(headers or {})}
            )
        except httpx.TransportError as exc:
            raise GitHubUnavailable(f"{method} {url}: {exc!r}") from exc
        status = response.status_code
        if status < 300 or status == 304:
            return response
        wait = rate_limit_wait(response)
        if wait is not None:
            raise RateLimited(status, wait)
        if 400 <= status < 500:
            raise GitHubRejected(status, response.text[:200])
        raise GitHubUnavailable(f"{method} {url}: HTTP {status}")

    async def get_json(self, path: str, params: dict[str, str] | None = None) -> Any:
        """``GET`` and decode the JSON body."""
        return (await self.request("GET", path, params=params)).json()


def rate_limit_wait(response: httpx.Response) -> float | None:
    """Seconds to wait if ``response`` is a rate limit, else ``None``."""
    if response.status_code not in (403, 429):
        return None
    retry_after = header_wait(response, "Retry-After")
    if retry_after is not None:
        return retry_after
    if response.headers.get("X-RateLimit-Remaining") == "0":
        reset = response.headers.get("X-RateLimit-Reset", "")
        if reset.strip().isdigit():
            return clamp_wait(float(reset) - time.time())
        return 60.0
    if response.status_code == 429:
        return 60.0
    return None


def next_link(response: httpx.Response) -> str | None:
    """The ``rel="next"`` URL of a paginated answer, if any."""
    link = response.links.get("next")
    return link.get("url") if link else None
