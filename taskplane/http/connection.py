"""Connection lifetime: let the server finish each exchange so HTTP/1.1 closing works.

Hypercorn decides what happens to a connection after a response (close it for
HTTP/1.0 or ``Connection: close``, otherwise start the keep-alive timer) *inside* the
ASGI ``send`` call that carries the last body chunk. On the way it tells the app the
exchange is over (``http.disconnect``), and quart-trio answers that by cancelling the
request's nursery, which is the very task running that ``send``. The cancellation
lands in hypercorn's close path (its ``send_eof`` checkpoint), so the socket was
never closed and the keep-alive timer never started: every connection stayed open
until the client left. :class:`FinishExchanges` shields that last ``send`` so the
server's own bookkeeping runs to its end (rule: "Connections close as HTTP/1.1
says").

:class:`CloseAmbiguousFraming` keeps RFC 9112 §6.1: a request with both
``Content-Length`` and ``Transfer-Encoding`` is answered (its body read as chunked,
``Transfer-Encoding`` winning), then its connection is closed, since a peer that sent
both may frame the next request differently than the server does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import trio

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]
"""An ASGI application (scope, receive, send); loosely typed, as frameworks differ."""


def is_last_chunk(message: Message) -> bool:
    """``True`` for the ASGI message that ends an HTTP response body."""
    return message.get("type") == "http.response.body" and not message.get("more_body", False)


class FinishExchanges:
    """ASGI middleware: the final ``http.response.body`` send of ``app`` is never
    cancelled.

    Only that one call is shielded: it writes the last bytes (hypercorn already
    shields socket writes) and then closes the connection or arms its keep-alive
    timer, both bounded. A client that disconnects earlier still cancels the app
    as before. Other scopes (lifespan) pass through untouched.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return

        async def send_shielded(message: Message) -> None:
            if not is_last_chunk(message):
                await send(message)  # no cancel scope per body chunk (SSE fan-out)
                return
            with trio.CancelScope(shield=True):
                await send(message)

        await self.app(scope, receive, send_shielded)


class CloseAmbiguousFraming:
    """ASGI middleware: an HTTP/1.x request with both ``Content-Length`` and
    ``Transfer-Encoding`` gets ``Connection: close`` on its answer, so hypercorn closes
    the connection once it is sent (RFC 9112 §6.1). Other requests pass untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or not _ambiguous(scope):
            await self.app(scope, receive, send)
            return

        async def send_closing(message: Message) -> None:
            if message.get("type") == "http.response.start":
                headers = [
                    (k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"
                ]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive, send_closing)


def _ambiguous(scope: Any) -> bool:
    if not str(scope.get("http_version", "")).startswith("1"):
        return False
    names = {bytes(name).lower() for name, _ in scope.get("headers", [])}
    return b"content-length" in names and b"transfer-encoding" in names
