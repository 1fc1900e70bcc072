"""Early refusal: a send of new work is answered 503 before the web framework sees it.

Design rule "Wake admission is bounded": while the wake queue is full and as many
senders as allowed already wait for a slot (admission is closed), new work is refused
with 503 and ``Retry-After``. Clients that ignore ``Retry-After`` keep sending; if each
refusal cost as much as an acceptance (routing, request objects, strict parsing,
decoding and validating the body), refusals would take the CPU the agent's turns need
and accepted Tasks/s would collapse. :func:`refuse_early` wraps the ASGI app and, only
while admission is closed, answers such a send itself at a fraction of that cost:

1. a ``POST`` to ``message:send`` or ``message:stream`` (plain or tenant route);
2. the bearer token names a principal (otherwise the app answers, 401 as usual);
3. the body (at most 1 MiB) is read and parsed with the plain JSON parser, and only
   its ``message`` object is decoded;
4. the plane says this message is certainly new work (its messageId was never claimed
   by this principal and tenant, and it is not answered with a direct reply).

Anything else goes to the app unchanged, body included. So a duplicate of an accepted
message still gets its prior answer (the app looks it up as usual), and a malformed
request still gets its 400 while admission is open; while it is closed, a well-formed
message of new work is refused before the rest of the request (headers, configuration,
limits) is validated, and a retry once admission reopens is validated in full.

Each early refusal is counted and logged like any request (``http_request``, reason
``UNAVAILABLE``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from taskplane.errors import Overloaded, TaskplaneError
from taskplane.http import routing
from taskplane.http.auth import Credentials
from taskplane.http.body import MAX_BODY_BYTES
from taskplane.http.connection import ASGIApp, Message, Receive, Send
from taskplane.http.errors import error_body, error_headers
from taskplane.http.metrics import Metrics
from taskplane.http.negotiation import response_media_type
from taskplane.model.codec import decode
from taskplane.model.types import Message as A2AMessage
from taskplane.scope import Scope

log = logging.getLogger("taskplane.http")

_SEND_HANDLERS = frozenset({"send", "stream"})

Refusal = Callable[[Scope, A2AMessage], Overloaded | None]
"""The plane's verdict on a send: the 503 to answer at once, or ``None``."""


class EarlyRefusal:
    """What :func:`refuse_early` needs from the server.

    Args:
        closed: whether admission is closed now (cheap, synchronous).
        refusal: the 503 for a send of new work, or ``None`` (see
            ``TaskPlane.refusal_at_once``).
        credentials: bearer tokens -> principals.
        metrics: where answered requests are counted.
    """

    def __init__(
        self,
        closed: Callable[[], bool],
        refusal: Refusal,
        credentials: Credentials,
        metrics: Metrics,
    ) -> None:
        self.closed = closed
        self.refusal = refusal
        self.credentials = credentials
        self.metrics = metrics
        self.refused = 0
        """Sends refused here since start."""

    def verdict(
        self, route: routing.Route, headers: list[tuple[bytes, bytes]], raw: bytes
    ) -> tuple[Overloaded, str] | None:
        """The 503 and principal for this send, or ``None`` to let the app answer.

        Never raises: anything unexpected in the request is the app's to answer.
        """
        authorization = [v for k, v in headers if k == b"authorization"]
        if len(authorization) != 1:
            return None
        try:
            principal = self.credentials.authenticate(authorization[0].decode("latin-1"))
            body = json.loads(raw)
            message = decode(body["message"], A2AMessage)
        except (TaskplaneError, ValueError, TypeError, KeyError):
            return None
        error = self.refusal(Scope(route.tenant, principal), message)
        return None if error is None else (error, principal)


def refuse_early(app: ASGIApp, gate: EarlyRefusal) -> ASGIApp:
    """Wrap ``app`` so sends of new work are refused with 503 at the ASGI edge while
    admission is closed (see the module docstring). Everything else, and every
    request while admission is open, reaches ``app`` untouched. Cancelling (the client
    left) stops the refusal like any request."""

    async def wrapped(scope: Any, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST" or not gate.closed():
            await app(scope, receive, send)
            return
        try:
            route = routing.match("POST", scope.get("path", ""))
        except TaskplaneError:
            route = None
        if route is None or route.handler not in _SEND_HANDLERS:
            await app(scope, receive, send)
            return
        started = time.perf_counter()
        chunks, complete = await _read_body(receive)
        raw = b"".join(m.get("body", b"") for m in chunks)
        verdict = gate.verdict(route, scope.get("headers", []), raw) if complete else None
        if verdict is None:
            await app(scope, _replay(chunks, receive), send)
            return
        error, principal = verdict
        gate.refused += 1
        await _answer(scope, send, error)
        _account(gate.metrics, route, principal, error, time.perf_counter() - started)

    return wrapped


async def _read_body(receive: Receive) -> tuple[list[Message], bool]:
    """The request's ``http.request`` messages, read until the body ends or passes
    1 MiB; ``True`` if the body ended within the limit."""
    messages: list[Message] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message.get("type") != "http.request":
            return messages, False  # the client left: the app sees it too
        size += len(message.get("body", b""))
        if size > MAX_BODY_BYTES:
            return messages, False
        if not message.get("more_body", False):
            return messages, True


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """A ``receive`` that gives ``messages`` again, then reads on."""
    pending = list(messages)

    async def replaying() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replaying


async def _answer(scope: Any, send: Send, error: Overloaded) -> None:
    accept = [v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"accept"]
    media_type = response_media_type(",".join(accept) if accept else None)
    payload = json.dumps(error_body(error), separators=(",", ":")).encode()
    headers = [(b"content-type", media_type.encode()), (b"content-length", b"%d" % len(payload))]
    headers += [(k.lower().encode(), v.encode()) for k, v in error_headers(error).items()]
    await send({"type": "http.response.start", "status": error.http_status, "headers": headers})
    await send({"type": "http.response.body", "body": payload, "more_body": False})


def _account(
    metrics: Metrics, route: routing.Route, principal: str, error: Overloaded, elapsed_s: float
) -> None:
    """Count the refusal and write its access log line, as the app does for others."""
    metrics.requests.labels(route.template, "POST", "503").inc()
    metrics.request_seconds.labels(route.template).observe(elapsed_s)
    log.info(
        "POST %s 503",
        route.template,
        extra={
            "event": "http_request",
            "method": "POST",
            "route": route.template,
            "status": 503,
            "durationMs": round(elapsed_s * 1000, 3),
            "principal": principal,
            "taskId": None,
            "reason": error.reason,
        },
    )
