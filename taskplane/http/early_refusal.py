"""Early refusal: while the plane is crowded, new work waits or is refused before the
app parses it.

Design rule "Wake admission is bounded": while all 128 waiting slots of the wake queue
are taken, a send of new work waits in intake (at most ``ADMISSION_WAIT_S``, at most
``MAX_ADMISSION_WAITERS`` senders) for a slot, then is refused with 503 and
``Retry-After``. Clients that ignore
``Retry-After`` keep sending; if each refusal cost as much as an acceptance (routing,
request objects, strict parsing, decoding and validating the body) or if refusals were
answered as fast as they arrive, refusing would take the CPU the agent's turns need and
accepted Tasks/s would collapse. :func:`refuse_early` wraps the ASGI app and, only while
the queue is full and ``CROWDED_WAITERS`` sends already wait in intake (the plane is
*crowded*), handles a send itself:

1. a ``POST`` to ``message:send`` or ``message:stream`` (plain or tenant route);
2. its body (at most 1 MiB) parsed with the plain JSON parser, only its ``message``
   decoded, and the bearer token mapped to a principal; anything unreadable goes to
   the app, which answers it as usual (401, 400...);
3. the plane says it is certainly new work: its messageId was never claimed by this
   principal and tenant (the claim index; so it is no duplicate) and it is not
   answered with a direct reply. Otherwise it goes to the app: a duplicate of an
   accepted message gets its prior answer, ``ping`` its ``pong``;
4. new work waits its turn, parked in arrival order (no CPU; the server reads nothing
   more from its connection meanwhile). First in line, it waits up to
   ``ADMISSION_WAIT_S`` for a free slot (parked); if one frees it goes to the app
   (and is accepted); otherwise it is answered 503, at most
   :data:`REFUSALS_PER_S` a second. A client that leaves while waiting gets nothing,
   and nothing is recorded. The bodies of waiting sends are bounded
   (:data:`MAX_PARKED_BYTES`); beyond that a send is refused at once.

So refusals cost little and their rate is bounded, whatever the clients do, and the
turns keep their CPU. While the queue is full a well-formed send of new work is
refused before the rest of the request (headers, configuration, limits) is validated;
once it has room, a retry is validated in full. Each early refusal is counted and
logged like any request (``http_request``, status 503, reason ``UNAVAILABLE``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from taskplane.actors.wake_admission import ADMISSION_WAIT_S
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

REFUSALS_PER_S = 200.0
"""Early refusals answered per second at most. Sends of new work beyond that wait,
parked in arrival order (no CPU), and so does their connection: the server reads
nothing more from it meanwhile. A send whose turn comes after a slot freed goes to the
app instead, and is accepted."""

MAX_PARKED_BYTES = 64 * 1024 * 1024
"""Request bodies held by sends waiting for their turn, at most (bytes). A send whose
body would pass it is refused at once, unpaced; below it a waiting send costs its
body and its connection, no CPU."""

Refusal = Callable[[Scope, A2AMessage], Overloaded | None]
"""The plane's verdict on a send: the 503 to answer without waiting, or ``None``."""


class EarlyRefusal:
    """What :func:`refuse_early` needs from the server, and its pacing state.

    Args:
        closed: whether the plane is crowded now (``TaskPlane.crowded``; cheap,
            synchronous).
        refusal: the 503 for a send of certainly new work while the queue is full, or
            ``None`` (see ``TaskPlane.refusal_at_once``).
        credentials: bearer tokens -> principals.
        metrics: where answered requests are counted.
        room: wait up to the given seconds for a free waiting slot (``True``) or
            give up (``False``; see ``TaskPlane.wait_for_room``).
    """

    def __init__(
        self,
        closed: Callable[[], bool],
        refusal: Refusal,
        credentials: Credentials,
        metrics: Metrics,
        room: Callable[[float], Awaitable[bool]],
    ) -> None:
        self.room = room
        self.closed = closed
        self.refusal = refusal
        self.credentials = credentials
        self.metrics = metrics
        self.lane = trio.Lock()
        """Held by the one send being refused now (a fair lock: arrival order)."""
        self.next_refusal_at = 0.0
        """trio time before which no further early refusal is answered."""
        self.refused = 0
        """Sends refused here since start."""
        self.parked_bytes = 0
        """Body bytes of the sends waiting for :attr:`lane` now."""

    def parse(
        self, route: routing.Route, headers: list[tuple[bytes, bytes]], raw: bytes
    ) -> tuple[Scope, A2AMessage] | None:
        """The caller's scope and the send's message, or ``None`` when the bearer token
        or the body is not acceptable (the app answers those). Never raises."""
        authorization = [v for k, v in headers if k == b"authorization"]
        if len(authorization) != 1:
            return None
        try:
            principal = self.credentials.authenticate(authorization[0].decode("latin-1"))
            body = json.loads(raw)
            message = decode(body["message"], A2AMessage)
        except (TaskplaneError, ValueError, TypeError, KeyError):
            return None
        return Scope(route.tenant, principal), message

    async def wait_turn(self, receive: Receive) -> tuple[bool, list[Message]]:
        """Wait (parked) for :attr:`lane`: ``(True, seen)`` once held, ``(False,
        seen)`` if the client left first; ``seen``: what ``receive`` gave meanwhile."""
        seen: list[Message] = []
        held = False
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                while True:
                    message = await receive()
                    seen.append(message)
                    if message.get("type") == "http.disconnect":
                        nursery.cancel_scope.cancel()
                        return

            nursery.start_soon(watch)
            await self.lane.acquire()
            held = True
            nursery.cancel_scope.cancel()
        return held, seen


def refuse_early(app: ASGIApp, gate: EarlyRefusal) -> ASGIApp:
    """Wrap ``app`` so sends of new work wait (or are refused with 503) at the ASGI
    edge while the plane is crowded (see the module docstring). Everything else, and
    every request while it is not, reaches ``app`` with its body untouched. A
    client that leaves while its send waits for its turn gets nothing (nothing was
    recorded)."""

    async def wrapped(scope: Any, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST" or not gate.closed():
            await app(scope, receive, send)
            return
        try:
            route: routing.Route | None = routing.match("POST", scope.get("path", ""))
        except TaskplaneError:
            route = None
        if route is None or route.handler not in _SEND_HANDLERS:
            await app(scope, receive, send)
            return
        started = time.perf_counter()
        chunks, complete = await _read_body(receive)
        raw = b"".join(m.get("body", b"") for m in chunks)
        parsed = gate.parse(route, scope.get("headers", []), raw) if complete else None
        refusal = gate.refusal(*parsed) if parsed is not None else None
        if parsed is None or refusal is None:
            await app(scope, _replay(chunks, receive), send)  # the app answers as usual
            return
        if gate.parked_bytes + len(raw) > MAX_PARKED_BYTES:
            await _refuse(gate, scope, send, route, parsed[0].principal, refusal, started)
            return  # the waiting bodies would pass their bound: refused at once
        gate.parked_bytes += len(raw)
        try:
            held, seen = await gate.wait_turn(receive)
        finally:
            gate.parked_bytes -= len(raw)
        if not held:
            return  # the client left while its send waited: nothing to answer
        try:  # one at a time; refusals at most REFUSALS_PER_S
            await trio.sleep_until(gate.next_refusal_at)
            error = gate.refusal(*parsed)  # a slot may have freed meanwhile
            if error is not None and await gate.room(ADMISSION_WAIT_S):
                error = None  # a slot freed while this send was first in line
            if error is not None:
                gate.next_refusal_at = trio.current_time() + 1 / REFUSALS_PER_S
        finally:
            gate.lane.release()
        if error is None:
            await app(scope, _replay(chunks + seen, receive), send)
            return
        await _refuse(gate, scope, send, route, parsed[0].principal, error, started)

    return wrapped


async def _refuse(
    gate: EarlyRefusal,
    scope: Any,
    send: Send,
    route: routing.Route,
    principal: str,
    error: Overloaded,
    started: float,
) -> None:
    gate.refused += 1
    await _answer(scope, send, error)
    _account(gate.metrics, route, principal, error, time.perf_counter() - started)


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
