"""The quart-trio application: one dispatcher for the whole A2A HTTP+JSON surface.

Per request: route (404/405), Agent Card (public), otherwise bearer authentication
(401), ``A2A-Version`` (400 VERSION_NOT_SUPPORTED), ``A2A-Extensions`` activation
(echoed in the response header), content type (415), body size (413) and JSON shape
(400), then the handler. Every non-2xx answer is a §11.6 ``google.rpc.Status`` body
(errors are rendered as ``google.rpc.Status``); an unexpected exception is logged and answered 500.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from contextlib import aclosing
from typing import Any

import attrs
import trio
from quart import Response, request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from taskplane.errors import (
    Internal,
    InvalidRequest,
    PayloadTooLarge,
    TaskplaneError,
    Unauthenticated,
)
from taskplane.http import routing
from taskplane.http.auth import Credentials
from taskplane.http.body import MAX_BODY_BYTES, check_body_size, parse_json_object
from taskplane.http.card import card_headers, etag_matches
from taskplane.http.connection import finish_exchanges
from taskplane.http.early_refusal import EarlyRefusal
from taskplane.http.errors import error_body, error_headers
from taskplane.http.handlers import Call, EventStream, Handlers, Reply
from taskplane.http.metrics import METRICS_MEDIA_TYPE, Metrics, PlaneStatistics
from taskplane.http.negotiation import (
    EXTENSIONS_HEADER,
    VERSION_HEADER,
    activate_extensions,
    check_request_content_type,
    check_version,
    response_media_type,
)
from taskplane.http.sse import EVENT_STREAM_MEDIA_TYPE, sse_error_frame, sse_headers
from taskplane.scope import Scope

log = logging.getLogger("taskplane.http")

ALL_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
_BODYLESS = frozenset({"list", "get", "push", "extended_card", "card"})
BODY_DRAIN_S = 5.0
"""Seconds an early answer waits to read (and discard) a request body it will not use."""
_EMPTY_BODY_OK = frozenset({"cancel", "subscribe"})  # the TCK posts these with no body
_OPERATIONAL = frozenset({"healthz", "readyz", "metrics"})
StatisticsSource = Callable[[], Awaitable[PlaneStatistics]]
"""Reads the running plane for ``/readyz`` and ``/metrics``."""


async def _no_statistics() -> PlaneStatistics:
    return PlaneStatistics()


@attrs.define
class _Exchange:
    """What one request turned out to be, for its access log line and metrics."""

    route: str = routing.UNMATCHED
    principal: str | None = None
    task_id: str | None = None
    reason: str | None = None


def create_app(
    handlers: Handlers,
    credentials: Credentials,
    card: dict[str, Any],
    *,
    supported_extensions: Sequence[str],
    statistics: StatisticsSource = _no_statistics,
) -> QuartTrio:
    """The ASGI app serving ``handlers``.

    Args:
        handlers: the A2A operations, bound to a running task plane.
        credentials: bearer tokens -> principals.
        card: the public Agent Card (ProtoJSON dict).
        supported_extensions: URIs a client may activate with ``A2A-Extensions``.
        statistics: reads the plane for ``/readyz`` and ``/metrics`` (default: a
            reading that is never ready).

    While admission is closed, a send of new work is refused with 503 before the app
    parses it (:mod:`taskplane.http.early_refusal`). Every request gets one
    ``http_request`` log line (method, route template,
    status, duration in ms, principal, Task ID; never a body, header value or token)
    and is counted in ``handlers.metrics``.
    """
    metrics = handlers.metrics
    app = QuartTrio("taskplane")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    app.config["RESPONSE_TIMEOUT"] = None  # SSE streams may last as long as their Task
    app.config["PROVIDE_AUTOMATIC_OPTIONS"] = False
    card_bytes = json.dumps(card, separators=(",", ":")).encode()
    card_hdrs = card_headers(card)

    async def dispatch(path: str = "") -> Response:
        started = time.perf_counter()
        exchange = _Exchange()
        body_read: list[bool] = []
        response = await answer(body_read, exchange)
        if not body_read and _has_body() and not await _drain_body():
            # We answer without having read the body (an early error, or a route that
            # takes none). Unless it could be drained (at most 1 MiB, BODY_DRAIN_S),
            # the connection must not be reused: its unread bytes would stall it.
            response.headers["Connection"] = "close"
        _account(metrics, exchange, response.status_code, time.perf_counter() - started)
        return response

    async def operational(handler: str) -> Response:
        if handler == "healthz":
            return Response(b'{"status":"ok"}', 200, content_type="application/json")
        stats = await statistics()
        if handler == "metrics":
            return Response(metrics.render(stats), 200, content_type=METRICS_MEDIA_TYPE)
        reasons = stats.not_ready_reasons()
        body = {"status": "not ready" if reasons else "ready", "reasons": reasons}
        return Response(
            json.dumps(body).encode(), 503 if reasons else 200, content_type="application/json"
        )

    async def answer(body_read: list[bool], exchange: _Exchange) -> Response:
        media_type = response_media_type(request.headers.get("Accept"))
        activated: tuple[str, ...] = ()
        try:
            route = routing.match(request.method, request.path)
            exchange.route, exchange.task_id = route.template, route.task_id
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
            if route.handler in _OPERATIONAL:
                return await operational(route.handler)
            if route.handler == "card":
                if etag_matches(request.headers.get("If-None-Match"), card_hdrs["ETag"]):
                    return Response(b"", 304, headers=card_hdrs, content_type="application/json")
                return Response(card_bytes, 200, headers=card_hdrs, content_type="application/json")
            authorization = request.headers.getlist("Authorization")
            if len(authorization) > 1:
                raise Unauthenticated("send exactly one Authorization header")
            principal = credentials.authenticate(authorization[0] if authorization else None)
            exchange.principal = principal
            check_version(request.headers.get(VERSION_HEADER), request.args.get(VERSION_HEADER))
            activated = activate_extensions(
                ",".join(request.headers.getlist(EXTENSIONS_HEADER)) or None,
                supported_extensions,
            )
            body = await _read_body(route.handler)
            if route.handler not in _BODYLESS:
                body_read.append(True)
            call = Call(
                Scope(route.tenant, principal),
                route.task_id,
                body,
                request.args,
                activated,
                head=request.method == "HEAD",
            )
            result = await getattr(handlers, route.handler)(call)
        except TaskplaneError as exc:
            exchange.reason = exc.reason
            return _error(exc, media_type, activated)
        except HTTPException as exc:
            error = _from_werkzeug(exc)
            exchange.reason = error.reason
            return _error(error, media_type, activated)
        except Exception as exc:
            log.exception("unhandled error", extra={"event": "http_internal_error"})
            exchange.reason = "INTERNAL"
            return _error(Internal(f"internal error: {type(exc).__name__}"), media_type, activated)
        headers = {EXTENSIONS_HEADER: ", ".join(activated)} if activated else {}
        if isinstance(result, EventStream):
            response = Response(
                _guard(result.frames, metrics, attrs.evolve(exchange)),
                200,
                headers={**sse_headers(), **headers},
                content_type=EVENT_STREAM_MEDIA_TYPE,
            )
            response.timeout = None
            return response
        assert isinstance(result, Reply)
        task = result.body.get("task")
        if exchange.task_id is None and isinstance(task, dict):
            exchange.task_id = task.get("id")
        payload = json.dumps(result.body, separators=(",", ":")).encode()
        return Response(payload, 200, headers=headers, content_type=media_type)

    app.add_url_rule("/", "root", dispatch, methods=ALL_METHODS)
    app.add_url_rule("/<path:path>", "dispatch", dispatch, methods=ALL_METHODS)
    app.asgi_app = finish_exchanges(  # type: ignore[method-assign,assignment]
        EarlyRefusal(app.asgi_app, handlers.plane.admission, credentials, metrics)
    )
    return app


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


async def _read_body(handler: str) -> dict[str, Any]:
    """The request's JSON object body (``{}`` when empty and allowed).

    Routes that take no body (reads, push-config, extended card) ignore one.

    Raises:
        PayloadTooLarge: over 1 MiB. UnsupportedMediaType: not JSON-typed.
        InvalidRequest: malformed JSON, or not an object.
    """
    if handler in _BODYLESS:
        return {}
    check_body_size(request.headers.get("Content-Length"))
    data = await request.get_data(cache=False, as_text=False)
    raw = data.encode() if isinstance(data, str) else data
    check_body_size(None, len(raw))
    check_request_content_type(request.headers.get("Content-Type"), bool(raw))
    return parse_json_object(raw, allow_empty=handler in _EMPTY_BODY_OK)


def _account(metrics: Metrics, exchange: _Exchange, status: int, elapsed_s: float) -> None:
    """Count one answered request and write its access log line."""
    metrics.requests.labels(exchange.route, request.method, str(status)).inc()
    metrics.request_seconds.labels(exchange.route).observe(elapsed_s)
    if status == 409:
        metrics.conflicts.inc()
    operational = exchange.route in ("/healthz", "/readyz", "/metrics")
    log.log(
        logging.DEBUG if operational else logging.INFO,
        "%s %s %d",
        request.method,
        exchange.route,
        status,
        extra={
            "event": "http_request",
            "method": request.method,
            "route": exchange.route,
            "status": status,
            "durationMs": round(elapsed_s * 1000, 3),
            "principal": exchange.principal,
            "taskId": exchange.task_id,
            "reason": exchange.reason,
        },
    )


async def _guard(
    frames: AsyncGenerator[bytes, None], metrics: Metrics, exchange: _Exchange
) -> AsyncIterator[bytes]:
    """Forward SSE bytes; an error after the first frame becomes an error frame.

    Counts the stream in ``taskplane_sse_subscribers`` while it is open and logs
    ``sse_stream_ended`` (route, principal, Task ID, frames, duration) when it ends.
    """
    started = time.perf_counter()
    count = 0
    metrics.sse_subscribers.inc()
    try:
        async with aclosing(frames):  # a client that hangs up closes the inner stream too
            async for chunk in frames:
                count += 1
                yield chunk
    except TaskplaneError as exc:
        yield sse_error_frame(error_body(exc))
    except Exception:
        log.exception("stream failed", extra={"event": "http_stream_failed"})
        yield sse_error_frame(
            error_body(Internal("the stream failed; read the task and resubscribe"))
        )
    finally:
        metrics.sse_subscribers.dec()
        log.info(
            "stream ended",
            extra={
                "event": "sse_stream_ended",
                "route": exchange.route,
                "principal": exchange.principal,
                "taskId": exchange.task_id,
                "frames": count,
                "durationMs": round((time.perf_counter() - started) * 1000, 3),
            },
        )


def _error(exc: TaskplaneError, media_type: str, activated: Sequence[str]) -> Response:
    headers = error_headers(exc)
    if "allow" in exc.metadata:
        headers["Allow"] = exc.metadata["allow"]
    if activated:
        headers[EXTENSIONS_HEADER] = ", ".join(activated)
    payload = json.dumps(error_body(exc), separators=(",", ":")).encode()
    return Response(payload, exc.http_status, headers=headers, content_type=media_type)


def _from_werkzeug(exc: HTTPException) -> TaskplaneError:
    if exc.code == 413:
        return PayloadTooLarge(
            f"the request body is over {MAX_BODY_BYTES} bytes",
            metadata={"limitBytes": str(MAX_BODY_BYTES)},
        )
    if exc.code is not None and 400 <= exc.code < 500:
        return InvalidRequest(exc.description or "bad request")
    return Internal(exc.description or "internal error")
