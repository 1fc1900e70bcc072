"""Early refusal: while the plane is crowded, new work waits or is refused before the
app parses it.

Design rule "Wake admission is bounded". When the wake queue is full, a send of new
work waits a little for a slot, then is refused with 503 and ``Retry-After``.
Clients that ignore ``Retry-After`` keep sending; if each refusal cost as much as an
acceptance (routing, request objects, strict parsing, decoding and validating the
body) or if refusals were answered as fast as they arrive, refusing would take the CPU
the agent's turns need and accepted Tasks/s would collapse. :class:`EarlyRefusal`
wraps the ASGI app and, only while admission says the plane is *crowded*, handles a
send itself:

1. a ``POST`` to ``message:send`` or ``message:stream`` (plain or tenant route), or
   a JSON-RPC call (``POST /``: its method is in its body, so its body is read as a
   send's is);
2. its body (at most 1 MiB) parsed once with the plain JSON parser, only its
   ``message`` decoded (a JSON-RPC call's ``params.message``, when its method is
   ``SendMessage`` or ``SendStreamingMessage``, or with ``TASKPLANE_A2A_COMPAT=0.3``
   a call served as 0.3 whose method is ``message/send`` or ``message/stream``, its
   params translated to 1.0 first (:mod:`taskplane.http.compat03`); its tenant is
   ``params.tenant``; a 0.3 HTTP+JSON send at ``/v1/message:send`` or
   ``/v1/message:stream`` served as 0.3 likewise, :mod:`taskplane.http.compat03_rest`,
   no tenant), and
   the bearer token mapped to a principal; anything unreadable, and any other
   JSON-RPC method, goes to the app with its body replayed, which answers it as
   usual (401, 400...);
3. admission's verdict says it is certainly new work: its messageId was never claimed
   by this principal and tenant (so it is no duplicate) and it is not answered with a
   direct reply. Otherwise it goes to the app: a duplicate of an accepted message gets
   its prior answer, ``ping`` its ``pong``;
4. new work waits its turn, parked in arrival order (no CPU; the server reads nothing
   more from its connection meanwhile). First in line, it waits a little for a free
   slot; if one frees it goes to the app (and is accepted); otherwise it is answered
   503, at a bounded rate. A client that leaves while waiting gets nothing, and
   nothing is recorded. The bodies of waiting sends are bounded; beyond that a send
   is refused at once.

When the plane is crowded, how long a send waits, how fast refusals are answered and
how many body bytes may wait are admission's to say
(:class:`~taskplane.actors.admission_contract.AdmissionGate`, its thresholds in
:mod:`taskplane.actors.admission_limits`); this module holds only the ASGI mechanics.

So refusals cost little and their rate is bounded, whatever the clients do, and the
turns keep their CPU. While the plane is crowded a well-formed send of new work is
refused before the rest of the request (headers, configuration, limits) is validated;
once it has room, a retry is validated in full. Each early refusal is counted and
logged like any request (``http_request``, status 503, reason ``UNAVAILABLE``); a
JSON-RPC send's refusal is a JSON-RPC error response (its ``id``, HTTP 503).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any
from urllib.parse import parse_qs

import trio

from taskplane.actors.admission_contract import AdmissionGate
from taskplane.errors import Overloaded, TaskplaneError
from taskplane.http import compat03, compat03_rest, jsonrpc, routing
from taskplane.http.auth import Credentials
from taskplane.http.body import MAX_BODY_BYTES, load_json
from taskplane.http.connection import ASGIApp, Message, Receive, Send
from taskplane.http.errors import error_body, error_headers, wire_identity
from taskplane.http.metrics import Metrics
from taskplane.http.negotiation import VERSION_HEADER, check_version, response_media_type
from taskplane.model.codec import decode_request
from taskplane.model.types import Message as A2AMessage
from taskplane.scope import Scope

log = logging.getLogger("taskplane.http")

_SEND_OPERATIONS = frozenset({"send", "stream", "jsonrpc"})
_SEND_METHODS_03 = frozenset(m for m, v1 in compat03.METHODS.items() if v1 in jsonrpc.SEND_METHODS)
"""The 0.3 JSON-RPC methods that send a message (``message/send``, ``message/stream``)."""


class EarlyRefusal:
    """ASGI middleware: sends of new work wait (or are refused with 503) at the edge
    while ``gate`` says the plane is crowded (see the module docstring). Everything
    else, and every request while it is not, reaches ``app`` with its body untouched.

    Args:
        app: the wrapped ASGI app.
        gate: admission (``TaskPlane.admission``): whether the plane is crowded, the
            verdict on a send, the bound on waiting bodies and the pace of refusals.
        credentials: bearer tokens -> principals.
        metrics: where answered requests are counted.
        compat03: ``TASKPLANE_A2A_COMPAT=0.3``: 0.3 sends (both bindings) are judged
            too, as the app reads them (served as 0.3 by ``A2A-Version``, translated
            to 1.0).
    """

    def __init__(
        self,
        app: ASGIApp,
        gate: AdmissionGate,
        credentials: Credentials,
        metrics: Metrics,
        *,
        compat03: bool = False,
    ) -> None:
        self.app = app
        self.compat03 = compat03
        self.gate = gate
        self.credentials = credentials
        self.metrics = metrics
        self.lane = trio.Lock()
        """Held by the one send being refused now (a fair lock: arrival order)."""
        self.refused = 0
        """Sends refused here since start."""

    async def __call__(self, scope: Any, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection scope. A client that leaves while its send waits
        for its turn gets nothing (nothing was recorded)."""
        gate = self.gate
        if scope.get("type") != "http" or scope.get("method") != "POST" or not gate.crowded:
            await self.app(scope, receive, send)
            return
        try:
            route: routing.Route | None = routing.match("POST", scope.get("path", ""))
        except TaskplaneError:
            route = None
        if route is None or route.operation not in _SEND_OPERATIONS:
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        chunks, complete = await _read_body(receive)
        raw = b"".join(m.get("body", b"") for m in chunks)
        parsed = self.parse(route, scope, raw) if complete else None
        rpc_id = jsonrpc.request_id(parsed[2]) if parsed is not None else None
        verdict = gate.check(parsed[0], parsed[1]) if parsed is not None else None
        refusal = gate.refusal(verdict) if verdict is not None else None
        if parsed is None or verdict is None or refusal is None:
            with gate.carrying(verdict):  # the plane takes it: one triage per send
                await self.app(scope, _replay(chunks, receive), send)  # the app answers
            return
        principal = parsed[0].principal
        if not gate.park(len(raw)):
            await self._refuse(scope, send, route, principal, refusal, started, rpc_id)
            return  # the waiting bodies would pass their bound: refused at once
        try:
            held, seen = await self.wait_turn(receive)
        finally:
            gate.unpark(len(raw))
        if not held:
            return  # the client left while its send waited: nothing to answer
        try:  # one at a time, at admission's pace
            error = await gate.paced_refusal(verdict)
        finally:
            self.lane.release()
        if error is None:
            with gate.carrying(verdict):
                await self.app(scope, _replay(chunks + seen, receive), send)
            return
        await self._refuse(scope, send, route, principal, error, started, rpc_id)

    def parse(
        self, route: routing.Route, scope: Any, raw: bytes
    ) -> tuple[Scope, A2AMessage, Any] | None:
        """The caller's scope, the send's message and the parsed body, or ``None`` when
        the bearer token or the body is not acceptable, or the JSON-RPC call sends no
        message (the app answers those). ``scope``: the ASGI connection scope. Never
        raises."""
        headers: list[tuple[bytes, bytes]] = scope.get("headers", [])
        authorization = [v for k, v in headers if k == b"authorization"]
        if len(authorization) != 1:
            return None
        try:
            principal = self.credentials.authenticate(authorization[0].decode("latin-1"))
            body = load_json(raw)
            request, tenant = body, route.tenant
            if route.operation == "jsonrpc":
                if self.compat03 and body.get("method") in _SEND_METHODS_03:
                    if _served_version(scope) != compat03.VERSION:
                        return None  # a 1.0 call naming a 0.3 method: the app refuses it
                    body = compat03.request_document(body)
                if body.get("method") not in jsonrpc.SEND_METHODS:
                    return None
                request, tenant = body["params"], body["params"].get("tenant") or ""
                if not (tenant == "" or routing.is_tenant(tenant)):
                    return None
            elif self.compat03 and tenant == compat03_rest.TENANT:
                if _served_version(scope) == compat03.VERSION:  # the 0.3 HTTP+JSON binding
                    request, tenant = compat03_rest.send_body(body), ""
            message = decode_request(request["message"], A2AMessage).value
        except (TaskplaneError, ValueError, TypeError, KeyError, AttributeError):
            return None
        return Scope(tenant, principal), message, body

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

    async def _refuse(
        self,
        scope: Any,
        send: Send,
        route: routing.Route,
        principal: str,
        error: Overloaded,
        started: float,
        rpc_id: jsonrpc.RequestId,
    ) -> None:
        self.refused += 1
        if route.operation == "jsonrpc":
            await _answer_rpc(send, error, rpc_id)
        else:
            await _answer(scope, send, error)
        _account(self.metrics, route, principal, error, time.perf_counter() - started)


def _served_version(scope: Any) -> str:
    """The version the app serves this request as, with the 0.3 setting on (as
    :func:`~taskplane.http.negotiation.check_version` reads header and query).

    Raises:
        VersionNotSupported: a version the app refuses (it answers that itself).
    """
    name = VERSION_HEADER.lower().encode()
    lines = [v.decode("latin-1") for k, v in scope.get("headers", []) if k == name]
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
    values = query.get(VERSION_HEADER)
    return check_version(
        ",".join(lines) if lines else None, values[0] if values else None, compat03=True
    )


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
    status = wire_identity(error).http_status
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload, "more_body": False})


async def _answer_rpc(send: Send, error: Overloaded, rpc_id: jsonrpc.RequestId) -> None:
    payload = jsonrpc.error_payload(rpc_id, error)
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(payload))]
    headers += [(k.lower().encode(), v.encode()) for k, v in error_headers(error).items()]
    status = wire_identity(error).http_status
    await send({"type": "http.response.start", "status": status, "headers": headers})
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
            "reason": wire_identity(error).reason,
        },
    )
