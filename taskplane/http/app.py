"""The quart-trio application: one dispatcher for the whole A2A HTTP+JSON surface.

Per request: route (404/405), Agent Card (public), otherwise bearer authentication
(401), ``A2A-Version`` (400 VERSION_NOT_SUPPORTED), ``A2A-Extensions`` activation
(echoed in the response header), content type (415), body size (413) and JSON shape
(400), then the handler. Every non-2xx answer is a §11.6 ``google.rpc.Status`` body
(PYTHON-MAPPING decision 5); an unexpected exception is logged and answered 500.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import aclosing
from typing import Any

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
from taskplane.http.errors import error_body, error_headers
from taskplane.http.handlers import Call, EventStream, Handlers, Reply
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


def create_app(
    handlers: Handlers,
    credentials: Credentials,
    card: dict[str, Any],
    *,
    supported_extensions: Sequence[str],
) -> QuartTrio:
    """The ASGI app serving ``handlers``.

    Args:
        handlers: the A2A operations, bound to a running task plane.
        credentials: bearer tokens -> principals.
        card: the public Agent Card (ProtoJSON dict).
        supported_extensions: URIs a client may activate with ``A2A-Extensions``.
    """
    app = QuartTrio("taskplane")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    app.config["RESPONSE_TIMEOUT"] = None  # SSE streams may last as long as their Task
    app.config["PROVIDE_AUTOMATIC_OPTIONS"] = False
    card_bytes = json.dumps(card, separators=(",", ":")).encode()
    card_hdrs = card_headers(card)

    async def dispatch(path: str = "") -> Response:
        body_read: list[bool] = []
        response = await answer(body_read)
        if not body_read and _has_body() and not await _drain_body():
            # We answer without having read the body (an early error, or a route that
            # takes none). Unless it could be drained (at most 1 MiB, BODY_DRAIN_S),
            # the connection must not be reused: its unread bytes would stall it.
            response.headers["Connection"] = "close"
        return response

    async def answer(body_read: list[bool]) -> Response:
        media_type = response_media_type(request.headers.get("Accept"))
        activated: tuple[str, ...] = ()
        try:
            route = routing.match(request.method, request.path)
            if route.handler == "card":
                if etag_matches(request.headers.get("If-None-Match"), card_hdrs["ETag"]):
                    return Response(b"", 304, headers=card_hdrs, content_type="application/json")
                return Response(card_bytes, 200, headers=card_hdrs, content_type="application/json")
            authorization = request.headers.getlist("Authorization")
            if len(authorization) > 1:
                raise Unauthenticated("send exactly one Authorization header")
            principal = credentials.authenticate(authorization[0] if authorization else None)
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
            return _error(exc, media_type, activated)
        except HTTPException as exc:
            return _error(_from_werkzeug(exc), media_type, activated)
        except Exception as exc:
            log.exception("unhandled error", extra={"event": "http_internal_error"})
            return _error(Internal(f"internal error: {type(exc).__name__}"), media_type, activated)
        headers = {EXTENSIONS_HEADER: ", ".join(activated)} if activated else {}
        if isinstance(result, EventStream):
            response = Response(
                _guard(result.frames),
                200,
                headers={**sse_headers(), **headers},
                content_type=EVENT_STREAM_MEDIA_TYPE,
            )
            response.timeout = None
            return response
        assert isinstance(result, Reply)
        payload = json.dumps(result.body, separators=(",", ":")).encode()
        return Response(payload, 200, headers=headers, content_type=media_type)

    app.add_url_rule("/", "root", dispatch, methods=ALL_METHODS)
    app.add_url_rule("/<path:path>", "dispatch", dispatch, methods=ALL_METHODS)
    app.asgi_app = finish_exchanges(app.asgi_app)  # type: ignore[method-assign,assignment]
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


async def _guard(frames: AsyncGenerator[bytes, None]) -> AsyncIterator[bytes]:
    """Forward SSE bytes; an error after the first frame becomes an error frame."""
    try:
        async with aclosing(frames):  # a client that hangs up closes the inner stream too
            async for chunk in frames:
                yield chunk
    except TaskplaneError as exc:
        yield sse_error_frame(error_body(exc))
    except Exception:
        log.exception("stream failed", extra={"event": "http_stream_failed"})
        yield sse_error_frame(
            error_body(Internal("the stream failed; read the task and resubscribe"))
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
        return PayloadTooLarge(f"the request body is over {MAX_BODY_BYTES} bytes")
    if exc.code is not None and 400 <= exc.code < 500:
        return InvalidRequest(exc.description or "bad request")
    return Internal(exc.description or "internal error")
