"""Answers written to the socket before (or without) the ASGI app: still A2A answers.

A connection refused for a cap, a request whose headers did not arrive in time, or a
method hypercorn would have re-cased gets a complete HTTP/1.1 response in the §11.6
error shape (:func:`taskplane.http.errors.error_body`), with ``Connection: close``,
since the server closes the connection right after it (design rule "No client can
stop or hold the server": every answer written below the app is in the A2A shape).
"""

from __future__ import annotations

import json
from http import HTTPStatus

from taskplane.errors import TaskplaneError
from taskplane.http.errors import error_body, error_headers, wire_identity
from taskplane.http.negotiation import JSON_MEDIA_TYPE

__all__ = ["raw_answer"]


def raw_answer(error: TaskplaneError) -> bytes:
    """The bytes of an HTTP/1.1 response for ``error``: status line, ``Content-Type:
    application/json``, ``Content-Length``, ``Connection: close``, the headers of
    :func:`~taskplane.http.errors.error_headers` (``Retry-After`` on 503), then the
    JSON body. Pure; never raises."""
    body = json.dumps(error_body(error), separators=(",", ":")).encode()
    status = wire_identity(error).http_status
    reason = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
    lines = [
        f"HTTP/1.1 {status} {reason}",
        f"content-type: {JSON_MEDIA_TYPE}",
        f"content-length: {len(body)}",
        "connection: close",
    ]
    lines += [f"{name.lower()}: {value}" for name, value in error_headers(error).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
