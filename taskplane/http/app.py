"""The quart-trio application: the A2A HTTP+JSON surface on Quart's own hooks.

Every path reaches one view (:meth:`_Edge.dispatch`): route (404/405); the Agent Card,
the console's files and the operational routes answer at once (public); every other operation is an
:class:`~taskplane.http.routing.Endpoint` taken in four named steps:

1. *authenticate and negotiate*: bearer authentication (401), ``A2A-Version`` (400
   VERSION_NOT_SUPPORTED), ``A2A-Extensions`` activation (echoed in the response
   header);
2. *read the body* by the endpoint's body policy: content type (415), body size (413)
   and JSON shape (400);
3. *call* its bound handler;
4. *render* its :class:`~taskplane.http.handlers.Reply` (JSON) or
   :class:`~taskplane.http.handlers.EventStream` (SSE).

Errors are answered by one Quart error handler per family: a ``TaskplaneError`` as
itself, a werkzeug ``HTTPException`` (Quart's own 413) as its ``TaskplaneError``, and
any other exception is logged and answered 500 ``INTERNAL``. Every non-2xx answer is a
§11.6 ``google.rpc.Status`` body. quart-trio hands each leaf of an exception group to
these handlers. The ASGI middleware (access log, early refusal, connection finishing)
is composed where the app is served (:func:`taskplane.server.edge_app`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio
from quart import Response, request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from taskplane.errors import (
    Internal,
    InvalidRequest,
    PayloadTooLarge,
    RequestTimeout,
    TaskplaneError,
    Unauthenticated,
)
from taskplane.http import compat03, compat03_rest, jsonrpc, routing
from taskplane.http.access import Exchange, exchange_of
from taskplane.http.auth import Credentials
from taskplane.http.body import MAX_BODY_BYTES, check_body_size, parse_json_object
from taskplane.http.card import card_headers, etag_matches
from taskplane.http.console import ConsoleFiles, console_response
from taskplane.http.errors import error_body, error_headers, wire_identity
from taskplane.http.handlers import Call, EventStream, Handlers, Reply
from taskplane.http.metrics import METRICS_MEDIA_TYPE, PlaneStatistics
from taskplane.http.negotiation import (
    EXTENSIONS_HEADER,
    SUPPORTED_VERSION,
    VERSION_HEADER,
    activate_extensions,
    check_request_content_type,
    check_version,
    response_media_type,
)
from taskplane.http.routing import BodyPolicy, Operation, endpoints
from taskplane.http.sse import EVENT_STREAM_MEDIA_TYPE, sse_headers
from taskplane.http.streams import guarded
from taskplane.scope import Scope

log = logging.getLogger("taskplane.http")

ALL_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
BODY_DRAIN_S = 5.0
"""Seconds an early answer waits to read (and discard) a request body it will not use."""
StatisticsSource = Callable[[], Awaitable[PlaneStatistics]]
"""Reads the running plane for ``/readyz`` and ``/metrics``."""
Public = Callable[[], Awaitable[Response]]
"""A route answered without authentication (Agent Card, console, health, readiness,
metrics)."""


async def no_statistics() -> PlaneStatistics:
    """A reading of a plane that is never ready (for an app served without one)."""
    return PlaneStatistics()


def create_app(
    handlers: Handlers,
    credentials: Credentials,
    card: dict[str, Any],
    *,
    supported_extensions: Sequence[str],
    statistics: StatisticsSource = no_statistics,
    compat03: bool = False,
) -> QuartTrio:
    """The Quart app serving ``handlers`` (the bare app: see :func:`taskplane.server.edge_app`
    for the middleware it is served in).

    Args:
        handlers: the A2A operations, bound to a running task plane.
        credentials: bearer tokens -> principals.
        card: the public Agent Card (ProtoJSON dict).
        supported_extensions: URIs a client may activate with ``A2A-Extensions``.
        statistics: reads the plane for ``/readyz`` and ``/metrics`` (default: a
            reading that is never ready).
        compat03: ``TASKPLANE_A2A_COMPAT=0.3``: JSON-RPC calls of A2A 0.3 are served
            too (:mod:`taskplane.http.compat03`; pass the card with its 0.3 fields), and
            the 0.3 HTTP+JSON binding at ``/v1/...`` (:mod:`taskplane.http.compat03_rest`).
    """
    edge = _Edge(handlers, credentials, card, supported_extensions, statistics, compat03)
    app = QuartTrio("taskplane")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    # One body deadline: the server's (http/deadlines.py, TASKPLANE_BODY_TIMEOUT_S).
    app.config["BODY_TIMEOUT"] = None
    app.config["RESPONSE_TIMEOUT"] = None  # SSE streams may last as long as their Task
    app.config["PROVIDE_AUTOMATIC_OPTIONS"] = False
    app.add_url_rule("/", "root", edge.dispatch, methods=ALL_METHODS)
    app.add_url_rule("/<path:path>", "dispatch", edge.dispatch, methods=ALL_METHODS)
    app.register_error_handler(TaskplaneError, _refused)
    app.register_error_handler(HTTPException, _framework_error)
    app.register_error_handler(Exception, _unexpected)
    app.after_request(_finish)
    return app


class _Edge:
    """The view of one app: routing, the public routes and the four steps."""

    def __init__(
        self,
        handlers: Handlers,
        credentials: Credentials,
        card: dict[str, Any],
        supported_extensions: Sequence[str],
        statistics: StatisticsSource,
        compat03: bool = False,
    ) -> None:
        self.compat03 = compat03
        self.metrics = handlers.metrics
        self.credentials = credentials
        self.supported_extensions = tuple(supported_extensions)
        self.statistics = statistics
        self.endpoints = endpoints(handlers)
        self.public: dict[Operation, Public] = {
            "card": self.card,
            "healthz": self.healthz,
            "readyz": self.readyz,
            "metrics": self.scrape,
            "console": self.console,
        }
        self.console_files = ConsoleFiles.load()
        self.card_bytes = json.dumps(card, separators=(",", ":")).encode()
        self.card_headers = card_headers(card)

    async def dispatch(self, path: str = "") -> Response:
        """Every path: route, then answer a public route, or take the four steps.

        Raises:
            TaskplaneError: rendered by the app's error handler (404, 405, 401, ...).
        """
        exchange = exchange_of(request.scope)
        route = routing.match(request.method, request.path)
        exchange.route, exchange.task_id = route.template, route.task_id
        _log_received(route)
        if route.operation in routing.PUBLIC:
            return await self.public[route.operation]()
        if route.operation == "jsonrpc":
            return await self.rpc(route, exchange)
        endpoint = self.endpoints[route.operation]
        rest03 = self.compat03 and route.tenant == compat03_rest.TENANT
        scope = self.authenticate(route, exchange, rest03=rest03)
        body = await _read_body(endpoint.body, exchange)
        if rest03 and exchange.version == compat03.VERSION:
            scope, body = self.rest03_request(route, scope, body)
        else:
            rest03 = False
        head = request.method == "HEAD"
        call = Call(scope, route.task_id, body, request.args, exchange.extensions, head=head)
        result = await endpoint.handler(call)
        return self.render(result, exchange, rest03=route.operation if rest03 else None)

    def rest03_request(
        self, route: routing.Route, scope: Scope, body: dict[str, Any]
    ) -> tuple[Scope, dict[str, Any]]:
        """A request of the 0.3 HTTP+JSON binding (``/v1/...`` served as 0.3) as the 1.0
        one: no tenant (``v1`` is the binding's prefix), the body translated
        (:mod:`taskplane.http.compat03_rest`).

        Raises:
            InvalidRequest: a body the 0.3 translation refuses.
        """
        if route.operation in ("send", "stream"):
            body = compat03_rest.send_body(body)
        elif route.operation == "push" and request.method == "POST":
            body = compat03_rest.push_config_body(route.task_id or "", body)
        return Scope("", scope.principal), body

    async def rpc(self, route: routing.Route, exchange: Exchange) -> Response:
        """``POST /``: one JSON-RPC 2.0 call, in the same four steps; from the first on,
        every answer is a JSON-RPC response (:mod:`taskplane.http.jsonrpc`).

        Raises:
            TaskplaneError: as the HTTP+JSON route of the same operation would, and the
                envelope's own errors (parse error, invalid request, method not found).
        """
        exchange.jsonrpc = True
        scope = self.authenticate(route, exchange)
        document = jsonrpc.parse_json(await _read_raw(exchange))
        exchange.rpc_id = jsonrpc.request_id(document)
        if exchange.version == compat03.VERSION and compat03.names_v1_method(document):
            exchange.version = SUPPORTED_VERSION  # a 1.0 client that sent no A2A-Version
        if exchange.version == compat03.VERSION:
            document = compat03.request_document(document)
        envelope = jsonrpc.parse_envelope(document)
        exchange.rpc_method = envelope.method
        call = jsonrpc.call_of(envelope, scope.principal, exchange.extensions)
        exchange.task_id = call.task_id
        return self.render(await self.endpoints[envelope.operation].handler(call), exchange)

    def authenticate(
        self, route: routing.Route, exchange: Exchange, *, rest03: bool = False
    ) -> Scope:
        """Step 1: the caller's scope, with the protocol version checked and the
        requested extensions this server supports activated (kept on ``exchange``;
        unknown ones are ignored). ``rest03``: a ``/v1/...`` route with the 0.3 setting
        on, where (as on JSON-RPC) an absent version means 0.3.

        Raises:
            Unauthenticated: no, several or an unknown bearer token.
            VersionNotSupported: an ``A2A-Version`` this server does not speak.
        """
        authorization = request.headers.getlist("Authorization")
        if len(authorization) > 1:
            raise Unauthenticated("send exactly one Authorization header")
        principal = self.credentials.authenticate(authorization[0] if authorization else None)
        exchange.principal = principal
        exchange.version = check_version(
            ",".join(request.headers.getlist(VERSION_HEADER)) or None,
            request.args.get(VERSION_HEADER),
            compat03=self.compat03 and (exchange.jsonrpc or rest03),
        )
        exchange.extensions = activate_extensions(
            ",".join(request.headers.getlist(EXTENSIONS_HEADER)) or None,
            self.supported_extensions,
        )
        return Scope(route.tenant, principal)

    def render(
        self, result: Reply | EventStream, exchange: Exchange, *, rest03: str | None = None
    ) -> Response:
        """Step 4: a JSON 200 for a :class:`Reply`, an SSE 200 for an :class:`EventStream`
        (``rest03``: the operation of a 0.3 HTTP+JSON request, answered in 0.3 shapes)."""
        headers = _extension_headers(exchange)
        if isinstance(result, EventStream):
            frames = guarded(result.frames, self.metrics, exchange)
            if exchange.jsonrpc:
                frames = jsonrpc.rpc_frames(frames, exchange.rpc_id)
                if exchange.version == compat03.VERSION:
                    frames = compat03.frames(frames)
            elif rest03 is not None:
                frames = compat03_rest.frames(frames)
            response = Response(
                frames,
                200,
                headers={**sse_headers(), **headers},
                content_type=EVENT_STREAM_MEDIA_TYPE,
            )
            response.timeout = None
            return response
        task = result.body.get("task")
        if exchange.task_id is None and isinstance(task, dict):
            exchange.task_id = task.get("id")
        if exchange.jsonrpc and exchange.version == compat03.VERSION:
            answer = compat03.result(exchange.rpc_method or "", result.body)
            payload = jsonrpc.result_payload(exchange.rpc_id, answer)
            return Response(payload, 200, headers=headers, content_type="application/json")
        if exchange.jsonrpc:
            payload = jsonrpc.result_payload(exchange.rpc_id, result.body)
            return Response(payload, 200, headers=headers, content_type="application/json")
        body = result.body if rest03 is None else compat03_rest.result(rest03, result.body)
        payload = json.dumps(body, separators=(",", ":")).encode()
        media_type = response_media_type(request.headers.get("Accept"))
        return Response(payload, 200, headers=headers, content_type=media_type)

    async def card(self) -> Response:
        """``GET /.well-known/agent-card.json``: the public card (304 when unchanged)."""
        if etag_matches(request.headers.get("If-None-Match"), self.card_headers["ETag"]):
            return Response(b"", 304, headers=self.card_headers, content_type="application/json")
        return Response(
            self.card_bytes, 200, headers=self.card_headers, content_type="application/json"
        )

    async def console(self) -> Response:
        """``GET /console/...``: a file of the browser console (:mod:`taskplane.http.console`)."""
        return console_response(
            self.console_files, request.path, request.headers.get("If-None-Match")
        )

    async def healthz(self) -> Response:
        """``GET /healthz``: the process answers."""
        return Response(b'{"status":"ok"}', 200, content_type="application/json")

    async def readyz(self) -> Response:
        """``GET /readyz``: 200 when ready, else 503 with the reasons."""
        reasons = (await self.statistics()).not_ready_reasons()
        body = {"status": "not ready" if reasons else "ready", "reasons": reasons}
        return Response(
            json.dumps(body).encode(), 503 if reasons else 200, content_type="application/json"
        )

    async def scrape(self) -> Response:
        """``GET /metrics``: the Prometheus exposition."""
        stats = await self.statistics()
        return Response(self.metrics.render(stats), 200, content_type=METRICS_MEDIA_TYPE)


async def _read_body(policy: BodyPolicy, exchange: Exchange) -> dict[str, Any]:
    """Step 2: the request's JSON object body by ``policy`` (``{}`` when it takes none,
    or when empty and allowed); ``exchange.body_read`` once the body was read.

    Raises:
        PayloadTooLarge: over 1 MiB. UnsupportedMediaType: not JSON-typed.
        InvalidRequest: malformed JSON, or not an object.
    """
    if policy == "none":
        return {}
    raw = await _read_raw(exchange)
    return parse_json_object(raw, allow_empty=policy == "json-or-empty")


async def _read_raw(exchange: Exchange) -> bytes:
    """The request body's bytes, its size and content type checked.

    Raises:
        PayloadTooLarge: over 1 MiB. UnsupportedMediaType: not JSON-typed.
    """
    check_body_size(request.headers.get("Content-Length"))
    data = await request.get_data(cache=False, as_text=False)
    exchange.body_read = True
    raw = data.encode() if isinstance(data, str) else data
    check_body_size(None, len(raw))
    check_request_content_type(request.headers.get("Content-Type"), bool(raw))
    return raw


async def _refused(exc: TaskplaneError) -> Response:
    """Error family 1: a ``TaskplaneError``, answered as itself."""
    return _error_response(exc)


async def _framework_error(exc: HTTPException) -> Response:
    """Error family 2: a werkzeug ``HTTPException`` (Quart's 413 over
    ``MAX_CONTENT_LENGTH``, a 408 should its body timeout be set, a 4xx it raises), answered
    as its ``TaskplaneError``.

    A 405 is a method no URL rule takes (``TRACE``...): it is answered as any other
    wrong method, with the path's own ``Allow``.
    """
    if exc.code == 405:
        try:
            routing.match(request.method, request.path)
        except TaskplaneError as error:
            return _error_response(error)
    return _error_response(_from_werkzeug(exc))


async def _unexpected(exc: Exception) -> Response:
    """Error family 3: anything else is a bug: logged, then answered 500 INTERNAL."""
    log.error("unhandled error", exc_info=exc, extra={"event": "http_internal_error"})
    return _error_response(Internal(f"internal error: {type(exc).__name__}"))


async def _finish(response: Response) -> Response:
    """After every answer: a request body the app did not read is drained, or the
    connection is closed (its unread bytes would stall the next request on it); a
    body that stopped arriving (408) is not waited for again."""
    if response.status_code == wire_identity(RequestTimeout).http_status:
        response.headers["Connection"] = "close"
    elif not exchange_of(request.scope).body_read and _has_body() and not await _drain_body():
        response.headers["Connection"] = "close"
    return response


def _error_response(exc: TaskplaneError) -> Response:
    exchange = exchange_of(request.scope)
    identity = wire_identity(exc)
    exchange.reason = identity.reason
    headers = {**error_headers(exc), **_extension_headers(exchange)}
    if exchange.jsonrpc:
        payload = jsonrpc.error_payload(exchange.rpc_id, exc)
        status = jsonrpc.http_status(exc)
        return Response(payload, status, headers=headers, content_type="application/json")
    if "allow" in exc.metadata:
        headers["Allow"] = exc.metadata["allow"]
    payload = json.dumps(error_body(exc), separators=(",", ":")).encode()
    media_type = response_media_type(request.headers.get("Accept"))
    return Response(payload, identity.http_status, headers=headers, content_type=media_type)


def _extension_headers(exchange: Exchange) -> dict[str, str]:
    return {EXTENSIONS_HEADER: ", ".join(exchange.extensions)} if exchange.extensions else {}


def _log_received(route: routing.Route) -> None:
    if log.isEnabledFor(logging.DEBUG):  # skip building the fields otherwise
        log.debug(
            "request %s %s",
            request.method,
            route.template,
            extra={
                "event": "http_request_received",
                "method": request.method,
                "route": route.template,
                "contentLength": request.headers.get("Content-Length"),
                "httpVersion": request.http_version,
            },
        )


async def _drain_body() -> bool:
    """Read and discard an unread request body; ``True`` if it was read to its end."""
    with trio.move_on_after(BODY_DRAIN_S):
        try:
            await request.get_data(cache=False)
        except Exception:  # too large, malformed, or the client went away
            return False
        return True
    return False


def _has_body() -> bool:
    length = request.headers.get("Content-Length", "0").strip()
    chunked = "chunked" in request.headers.get("Transfer-Encoding", "").lower()
    return chunked or length not in ("", "0")


def _from_werkzeug(exc: HTTPException) -> TaskplaneError:
    if exc.code == 413:
        return PayloadTooLarge(
            f"the request body is over {MAX_BODY_BYTES} bytes",
            metadata={"limitBytes": str(MAX_BODY_BYTES)},
        )
    if exc.code == 408:
        return RequestTimeout("the request body did not arrive in time")
    if exc.code is not None and 400 <= exc.code < 500:
        return InvalidRequest(exc.description or "bad request")
    return Internal(exc.description or "internal error")
