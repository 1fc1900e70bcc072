"""A client of the relay server protocol (``docs/sources/relay.md``, "Relay server
protocol"), version 1: ``GET /v1/agent``, ``GET /v1/messages`` (a long poll after a
cursor), ``POST /v1/ack`` (a cumulative cursor) and ``POST /v1/responses`` (a reply,
idempotent on its ``messageId``), each under ``RELAY_URL`` with
``Authorization: Bearer <RELAY_TOKEN>``.

Answers: a ``2xx`` is done. A ``429`` waits ``Retry-After`` (:class:`RelayRateLimited`:
nothing happened). A ``410`` (or ``400 bad_cursor``) of ``GET /v1/messages`` is
:class:`CursorExpired`. Any
other ``4xx`` is a definite refusal (:class:`RelayRejected`, a ``ProviderRejected``,
with its ``status`` and the error body's ``code``); a ``5xx``, a transport error, a
body that is not the documented JSON or one over :data:`MAX_BODY_BYTES` is an unknown
outcome (:class:`RelayUnavailable`); a ``2xx`` of an ack or a response is done
whatever its body. Rule "Bad input is bounded the same way on every
intake path": no answer is read past :data:`MAX_BODY_BYTES`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx

from taskplane.actors.outbound import ProviderRejected
from taskplane.sources.bounded_body import read_bounded
from taskplane.sources.rate_limit import header_wait
from taskplane.sources.relay_page import PageItem, PageUndecodable, decode_page

TIMEOUT_S = 30.0
"""Connect, write and read timeout of a call, in seconds (a long poll reads longer)."""
LONG_POLL_S = 25
"""The ``wait`` of ``GET /v1/messages``: seconds the server may hold an empty answer."""
PAGE_LIMIT = 10
"""The ``limit`` of ``GET /v1/messages``: messages in one page at most."""
MAX_BODY_BYTES = 16 << 20
"""Largest answer read: 16 MiB (a page of ``PAGE_LIMIT`` messages of at most 1 MiB
each, with room for its envelope). A larger one is a protocol error."""
DEFAULT_RATE_WAIT_S = 10.0
"""The wait after a ``429`` without a usable ``Retry-After``, in seconds."""


class RelayUnavailable(Exception):
    """A 5xx answer, a transport error or an answer out of protocol: the outcome is
    unknown."""


class AnswerTooLarge(RelayUnavailable):
    """An answer over :data:`MAX_BODY_BYTES`: unread past it."""


class PageUnreadable(RelayUnavailable):
    """A page of ``GET /v1/messages`` over :data:`MAX_BODY_BYTES`, or one that cannot
    be split into items with cursors: ask again with a smaller ``limit``."""


class RelayRejected(ProviderRejected):
    """A 4xx answer: definitely not done. ``code`` is the error body's code."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"the relay server answered {status} {code}: {message}")
        self.status = status
        self.code = code


class RelayRateLimited(RelayRejected):
    """HTTP 429: wait ``wait_s`` seconds."""

    def __init__(self, wait_s: float) -> None:
        super().__init__(429, "rate_limited", f"retry after {wait_s:.0f} s")
        self.wait_s = wait_s


class CursorExpired(RelayRejected):
    """HTTP 410 ``cursor_expired``: the server no longer knows the cursor."""


class RelayApi:
    """Calls against ``url`` (``RELAY_URL``) with ``token`` (``RELAY_TOKEN``)."""

    def __init__(self, client: httpx.AsyncClient, url: str, token: str) -> None:
        self.client = client
        self.base_url = url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}

    async def agent(self) -> str:
        """``GET /v1/agent``: the agent ID the token speaks as (the ``from`` of every
        response).

        Raises:
            RelayRejected (``401``: a bad token), RelayUnavailable.
        """
        body = await self.call("GET", "/v1/agent")
        agent = body.get("agentId")
        if not isinstance(agent, str) or not agent:
            raise RelayUnavailable("GET /v1/agent: the answer has no agentId")
        return agent

    async def messages(self, after: str | None, limit: int = PAGE_LIMIT) -> list[PageItem]:
        """``GET /v1/messages``: the next page of at most ``limit`` items after
        ``after`` (``None``: from the oldest message not acknowledged), decoded item by
        item (:func:`~taskplane.sources.relay_page.decode_page`); waits up to
        :data:`LONG_POLL_S` for one. A ``400 bad_cursor`` is :class:`CursorExpired`
        too: an unknown cursor is one the server does not know, whatever it answers.

        Raises:
            CursorExpired, RelayRateLimited, RelayRejected, RelayUnavailable,
            PageUnreadable (a RelayUnavailable: the answer is over
                :data:`MAX_BODY_BYTES` or cannot be split into items with cursors).
        """
        params: dict[str, str] = {"wait": str(LONG_POLL_S), "limit": str(limit)}
        if after is not None:
            params["after"] = after
        try:
            data = await self.send("GET", "/v1/messages", params=params, read_s=LONG_POLL_S + 15)
            return decode_page(data)
        except RelayRejected as exc:
            if exc.status == 400 and exc.code == "bad_cursor":
                raise CursorExpired(exc.status, exc.code, str(exc)) from exc
            raise
        except AnswerTooLarge as exc:
            raise PageUnreadable(str(exc)) from None
        except PageUndecodable as exc:
            raise PageUnreadable(f"GET /v1/messages: {exc}") from None

    async def ack(self, cursor: str) -> None:
        """``POST /v1/ack``: every message up to and including ``cursor`` is done.

        Raises:
            RelayRateLimited, RelayRejected, RelayUnavailable.
        """
        await self.send("POST", "/v1/ack", json_body={"cursor": cursor})  # 2xx: done

    async def respond(self, reply: Mapping[str, str]) -> None:
        """``POST /v1/responses`` of ``reply`` (``201`` stored, ``200`` stored before
        with the same body: both done).

        Raises:
            RelayRateLimited, RelayRejected (``409 response_conflict``: the
                ``messageId`` holds another body), RelayUnavailable.
        """
        await self.send("POST", "/v1/responses", json_body=dict(reply))  # 2xx: done

    async def call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json_body: object = None,
        read_s: float = TIMEOUT_S,
    ) -> dict[str, Any]:
        """One call; the decoded JSON object of a ``2xx`` answer (``{}`` when empty).

        Raises:
            CursorExpired, RelayRateLimited, RelayRejected, RelayUnavailable.
        """
        data = await self.send(method, path, params=params, json_body=json_body, read_s=read_s)
        if not data:
            return {}
        try:
            body = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise RelayUnavailable(f"{method} {path}: the answer is not JSON") from exc
        if not isinstance(body, dict):
            raise RelayUnavailable(f"{method} {path}: the answer is not a JSON object")
        return body

    async def send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json_body: object = None,
        read_s: float = TIMEOUT_S,
    ) -> bytes:
        """One call; the body of a ``2xx`` answer, unread as JSON.

        Raises:
            CursorExpired, RelayRateLimited, RelayRejected, RelayUnavailable,
            AnswerTooLarge (a RelayUnavailable).
        """
        timeout = httpx.Timeout(TIMEOUT_S, read=read_s)
        try:
            async with self.client.stream(
                method,
                self.base_url + path,
                params=params,
                json=json_body,
                headers=self._headers,
                timeout=timeout,
            ) as response:
                data = await read_bounded(response, MAX_BODY_BYTES)
        except httpx.TransportError as exc:
            raise RelayUnavailable(f"{method} {path}: {exc!r}") from exc
        if data is None:
            raise AnswerTooLarge(f"{method} {path}: the answer exceeds {MAX_BODY_BYTES} bytes")
        status = response.status_code
        if status == 429:
            wait = header_wait(response, "Retry-After")
            raise RelayRateLimited(DEFAULT_RATE_WAIT_S if wait is None else wait)
        if 400 <= status < 500:
            code, message = _error(data)
            kind = CursorExpired if status == 410 else RelayRejected
            # The URL tried (never the token, which is only in a header): a wrong
            # RELAY_URL shows in the error as the path it produced.
            raise kind(status, code, f"{message} ({method} {self.base_url + path})")
        if not 200 <= status < 300:
            raise RelayUnavailable(f"{method} {path}: HTTP {status}")
        return data


def _error(data: bytes) -> tuple[str, str]:
    """The ``code`` and ``message`` of an error body ``{"error": {"code",
    "message"}}`` (``""`` for what it lacks)."""
    try:
        body = json.loads(data)
    except (ValueError, RecursionError):
        return "", data[:200].decode(errors="replace")
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return "", ""
    return str(error.get("code", ""))[:100], str(error.get("message", ""))[:200]
