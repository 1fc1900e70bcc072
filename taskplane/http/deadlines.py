"""A request body arrives in bounded time (design rule "No client can stop or hold the server").

:class:`BodyDeadline` gives each HTTP request ``timeout_s`` seconds, from the moment
the app is called (its headers are in), to deliver its whole body. When the time is
up before the last body chunk, the app is cancelled and, if it had not started an
answer, the client gets 408 in the A2A error shape (``RequestTimeout``) and the
connection is closed. Headers have their own deadline, in
:mod:`taskplane.http.transport`.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import trio

from taskplane.errors import RequestTimeout
from taskplane.http.access import OTHER_METHOD, STANDARD_METHODS, UNMATCHED, exchange_of
from taskplane.http.connection import ASGIApp, Message, Receive, Send
from taskplane.http.errors import error_body, wire_identity
from taskplane.http.metrics import Metrics
from taskplane.http.negotiation import JSON_MEDIA_TYPE

__all__ = ["BodyDeadline"]

log = logging.getLogger("taskplane.http")


class BodyDeadline:
    """ASGI middleware: the request body must arrive within ``timeout_s`` seconds.

    Args:
        app: the ASGI app within.
        timeout_s: seconds for the whole body (``TASKPLANE_BODY_TIMEOUT_S``).
        metrics: a 408 it answers is counted in ``taskplane_http_requests``.
    """

    def __init__(self, app: ASGIApp, timeout_s: float, metrics: Metrics) -> None:
        self.app = app
        self.timeout_s = timeout_s
        self.metrics = metrics

    async def __call__(self, scope: Any, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        deadline = trio.current_time() + self.timeout_s
        body_in = False
        expired = False
        started = False

        with trio.CancelScope() as app_scope:

            async def bounded_receive() -> Message:
                nonlocal body_in, expired
                if body_in:
                    return await receive()
                with trio.move_on_at(deadline):
                    message = await receive()
                    kind = message.get("type")
                    if kind == "http.disconnect" or not message.get("more_body", False):
                        body_in = True
                    return message
                expired = True
                exchange_of(scope).answered_elsewhere = True  # the 408 below records it
                app_scope.cancel()
                await trio.lowlevel.checkpoint()  # raises Cancelled: the app stops here
                raise AssertionError("unreachable")  # pragma: no cover

            async def tracking_send(message: Message) -> None:
                nonlocal started
                if message.get("type") == "http.response.start":
                    started = True
                await send(message)

            await self.app(scope, bounded_receive, tracking_send)
        if expired and not started:
            await self._answer(scope, send)

    async def _answer(self, scope: Any, send: Send) -> None:
        error = RequestTimeout(f"the request body did not arrive within {self.timeout_s:g} s")
        payload = json.dumps(error_body(error), separators=(",", ":")).encode()
        headers = [
            (b"content-type", JSON_MEDIA_TYPE.encode()),
            (b"content-length", b"%d" % len(payload)),
        ]
        if str(scope.get("http_version", "1.1")).startswith("1"):
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": 408, "headers": headers})
        await send({"type": "http.response.body", "body": payload, "more_body": False})
        method = scope.get("method", "")
        label = method if method in STANDARD_METHODS else OTHER_METHOD
        self.metrics.requests.labels(UNMATCHED, label, "408").inc()
        log.info(
            "%s %s 408",
            label,
            scope.get("path", ""),
            extra={
                "event": "http_request",
                "method": label,
                "status": 408,
                "reason": wire_identity(error).reason,
            },
        )
