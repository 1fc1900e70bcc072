"""The access record of each request: one ``http_request`` log line and its counts.

:class:`AccessLog` is ASGI middleware around the app: it gives every HTTP request an
:class:`Exchange` in its ASGI scope (the app fills in what the request turned out to
be: route template, principal, Task ID, error reason) and, when the response head
is sent, counts the request in :class:`~taskplane.http.metrics.Metrics` and writes its
access log line (method, route template, status, duration in ms, principal, Task ID,
reason; never a body, header value or token). The duration runs from the request's
arrival to its response head (for a stream, its first bytes are not waited for).

Every request that reached the app is recorded, whatever the client did afterwards:
one that ends before an answer was started is logged and counted with
:data:`CLIENT_CLOSED_STATUS` (the client went away, or the app was cancelled) or 500
(the app raised; the listener's boundary answers 500).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import attrs

from taskplane.http.connection import ASGIApp, Message, Receive, Send
from taskplane.http.metrics import Metrics

log = logging.getLogger("taskplane.http")

UNMATCHED = "(unmatched)"
"""The route label of a request no route matched."""
EXCHANGE_KEY = "taskplane.exchange"
"""The ASGI scope key holding the request's :class:`Exchange`."""
OPERATIONAL_ROUTES = frozenset({"/healthz", "/readyz", "/metrics"})
"""Routes logged at DEBUG, not INFO (probes and scrapes would drown the log)."""
STANDARD_METHODS = frozenset(
    {"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"}
)
"""Methods counted and logged by name (RFC 9110 §9 and PATCH); any other is
:data:`OTHER_METHOD`, so a client inventing methods cannot grow ``/metrics``."""
OTHER_METHOD = "other"
"""The method label of a request whose method is not in :data:`STANDARD_METHODS`."""
_RESPONSE_HEADS = ("http.response.start", "websocket.http.response.start", "websocket.close")
"""The ASGI messages that carry an answer's status (a WebSocket handshake refused with
a close is answered 403 by the server library)."""
CLIENT_CLOSED_STATUS = 499
"""The status recorded for a request that ended with no answer started: its client
closed the connection (reset it, or a write failed) first. Never sent; nginx's code
for the same case."""
CLIENT_CLOSED_REASON = "CLIENT_CLOSED_REQUEST"
"""The reason logged with :data:`CLIENT_CLOSED_STATUS`."""


@attrs.define
class Exchange:
    """What one request turned out to be, for its access log line and its answer.

    Attributes:
        route: the route template (``(unmatched)`` until routed).
        principal: the authenticated principal, once known.
        task_id: the Task the request is about (path, or the Task answered).
        reason: the error reason of an error answer.
        extensions: extension URIs activated for the request (echoed in the answer).
        body_read: the app read the request body to its end.
        jsonrpc: the request is a JSON-RPC call (its answers, errors included, are
            JSON-RPC responses: :mod:`taskplane.http.jsonrpc`).
        rpc_id: the JSON-RPC request ``id`` its answer carries, once read.
        answered_elsewhere: the request was answered by middleware outside
            :class:`AccessLog` (the body deadline's 408), which records it itself.
        version: the ``A2A-Version`` the request is served as (``"0.3"`` only with
            ``TASKPLANE_A2A_COMPAT=0.3``: :mod:`taskplane.http.compat03`).
        rpc_method: the (1.0) JSON-RPC method called, once read.
    """

    route: str = UNMATCHED
    principal: str | None = None
    task_id: str | None = None
    reason: str | None = None
    extensions: tuple[str, ...] = ()
    body_read: bool = False
    jsonrpc: bool = False
    rpc_id: str | int | None = None
    answered_elsewhere: bool = False
    version: str = "1.0"
    rpc_method: str | None = None


def exchange_of(scope: Any) -> Exchange:
    """The request's :class:`Exchange` in its ASGI ``scope`` (a dict, which each
    framework types its own way), made on first use: an app served without
    :class:`AccessLog` still has one per request."""
    exchange = scope.get(EXCHANGE_KEY)
    if not isinstance(exchange, Exchange):
        exchange = scope[EXCHANGE_KEY] = Exchange()
    return exchange


class AccessLog:
    """ASGI middleware: count and log every HTTP request ``app`` answers, WebSocket
    handshakes included (:mod:`taskplane.http.upgrade` refuses them).

    Args:
        app: the ASGI app (it records what each request was in :func:`exchange_of`).
        metrics: ``taskplane_http_requests``, ``..._request_duration_seconds`` and
            ``taskplane_http_conflicts`` (409s) are updated here.
    """

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Any, receive: Receive, send: Send) -> None:
        if scope.get("type") not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        exchange = exchange_of(scope)
        method = scope.get("method", "GET")  # a WebSocket handshake is a GET
        if method not in STANDARD_METHODS:
            method = OTHER_METHOD
        accounted = False

        async def send_counted(message: Message) -> None:
            nonlocal accounted
            kind = message.get("type")
            if kind in _RESPONSE_HEADS and not accounted:
                accounted = True
                status = message["status"] if kind in _RESPONSE_HEADS[:2] else 403
                self._account(method, exchange, status, time.perf_counter() - started)
            await send(message)

        status = CLIENT_CLOSED_STATUS
        try:
            await self.app(scope, receive, send_counted)
        except Exception:
            status = 500
            raise
        finally:
            if not accounted and not exchange.answered_elsewhere and scope["type"] == "http":
                if status == CLIENT_CLOSED_STATUS and exchange.reason is None:
                    exchange.reason = CLIENT_CLOSED_REASON
                self._account(method, exchange, status, time.perf_counter() - started)

    def _account(self, method: str, exchange: Exchange, status: int, elapsed_s: float) -> None:
        self.metrics.requests.labels(exchange.route, method, str(status)).inc()
        self.metrics.request_seconds.labels(exchange.route).observe(elapsed_s)
        if status == 409 or exchange.reason == "DUPLICATE_MESSAGE_ID":  # JSON-RPC: HTTP 200
            self.metrics.conflicts.inc()
        log.log(
            logging.DEBUG if exchange.route in OPERATIONAL_ROUTES else logging.INFO,
            "%s %s %d",
            method,
            exchange.route,
            status,
            extra={
                "event": "http_request",
                "method": method,
                "route": exchange.route,
                "status": status,
                "durationMs": round(elapsed_s * 1000, 3),
                "principal": exchange.principal,
                "taskId": exchange.task_id,
                "reason": exchange.reason,
            },
        )
