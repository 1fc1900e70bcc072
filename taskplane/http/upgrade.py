"""WebSocket handshakes answered as A2A errors (design rule "Every answer is an A2A
answer").

The HTTP server library turns a request carrying ``Upgrade: websocket`` into an ASGI
``websocket`` scope, which the app never serves. :class:`RefuseUpgrades` answers it
instead, through the ASGI WebSocket denial response: the §11.6 error body of a path
no route has (404), a route that is not a ``GET`` (405 with its ``Allow``), or else
``400 UPGRADE_NOT_SUPPORTED``: this server speaks the HTTP+JSON binding only, and its
streams are Server-Sent Events. A server without the denial extension gets a close
(its library answers an empty 403).
"""

from __future__ import annotations

import json
from typing import Any

from taskplane.errors import TaskplaneError, UpgradeNotSupported
from taskplane.http import routing
from taskplane.http.access import exchange_of
from taskplane.http.connection import ASGIApp, Receive, Send
from taskplane.http.errors import error_body, error_headers, wire_identity

DENIAL_EXTENSION = "websocket.http.response"
"""The ASGI extension that lets an app answer a handshake with an HTTP response."""
POLICY_VIOLATION = 1008
"""The WebSocket close code sent when the denial response is not available."""


class RefuseUpgrades:
    """ASGI middleware: every ``websocket`` scope is refused with an A2A error; other
    scopes go to ``app``.

    The refusal is recorded on the request's :class:`~taskplane.http.access.Exchange`
    (route template, reason), so the access log counts it like any answer.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Receive, send: Send) -> None:
        if scope.get("type") != "websocket":
            await self.app(scope, receive, send)
            return
        exchange = exchange_of(scope)
        route, error = refusal(scope.get("path", "/"))
        if route is not None:
            exchange.route = route.template
        identity = wire_identity(error)
        exchange.reason = identity.reason
        connect = await receive()
        if connect.get("type") != "websocket.connect":
            return  # the client went away before the handshake was read
        if DENIAL_EXTENSION not in scope.get("extensions", {}):
            await send({"type": "websocket.close", "code": POLICY_VIOLATION})
            return
        headers = {"Content-Type": "application/json", **error_headers(error)}
        if "allow" in error.metadata:
            headers["Allow"] = error.metadata["allow"]
        payload = json.dumps(error_body(error), separators=(",", ":")).encode()
        await send(
            {
                "type": "websocket.http.response.start",
                "status": identity.http_status,
                "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
            }
        )
        await send({"type": "websocket.http.response.body", "body": payload})


def refusal(path: str) -> tuple[routing.Route | None, TaskplaneError]:
    """The route a WebSocket handshake on ``path`` names (``None`` if none) and the
    error it gets: the route's own 404 or 405, else ``UpgradeNotSupported``."""
    try:
        route = routing.match("GET", path)
    except TaskplaneError as exc:
        return None, exc
    return route, UpgradeNotSupported(
        f"{route.template} does not accept a WebSocket upgrade: this server speaks "
        "A2A over HTTP+JSON only (streams are Server-Sent Events: POST /message:stream, "
        "GET /tasks/{id}:subscribe)"
    )
