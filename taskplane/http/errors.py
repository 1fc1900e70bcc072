"""Render a :class:`~taskplane.errors.TaskplaneError` as an A2A HTTP+JSON error response.

A2A v1.0.1 §11.6 (docs/conformance.md): every error answer, A2A
or not (401, unknown route, 405, 413, 415, malformed JSON included), is the
``google.rpc.Status`` fields wrapped in ``error``::

    {"error": {"code": 404, "status": "NOT_FOUND", "message": "...",
               "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                            "reason": "TASK_NOT_FOUND", "domain": "a2a-protocol.org",
                            "metadata": {"taskId": "..."}}]}}

The status line, ``code``, ``status`` and ``reason`` all come from the exception class;
this module only shapes them. It is pure: no I/O, no trio, no Quart.
"""

from __future__ import annotations

import re
from typing import Any, Final

from taskplane.errors import A2A_ERROR_DOMAIN, TaskplaneError

ERROR_INFO_TYPE: Final = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST_TYPE: Final = "type.googleapis.com/google.rpc.BadRequest"
BEARER_CHALLENGE: Final = 'Bearer realm="taskplane"'

_SNAKE_SEGMENT = re.compile(r"_([a-z0-9])")


def error_body(exc: TaskplaneError) -> dict[str, Any]:
    """Build the §11.6 JSON error body for ``exc``.

    Args:
        exc: any taskplane error; its class fixes ``http_status``, ``grpc_status`` and
            ``reason``; its instance carries the message, metadata and field violations.

    Returns:
        ``{"error": {"code": int, "status": str, "message": str, "details": [...]}}``
        where ``code`` equals the HTTP status and ``details`` holds, in order:

        * always one ``google.rpc.ErrorInfo``: ``{"@type", "reason", "domain":
          "a2a-protocol.org"}`` plus ``"metadata": {str: str}`` when ``exc.metadata``
          is non-empty. ``map<string, string>`` admits only string values, so any
          non-string value that slipped in is rendered with ``str()``.
        * a ``google.rpc.BadRequest`` ``{"@type", "fieldViolations": [{"field",
          "description"}]}`` only when ``exc.field_violations`` is non-empty. A field
          path rooted at ``$`` is a codec (cattrs) path in Python names: the ``$``/``$.``
          root is dropped and ``snake_case`` becomes ``lowerCamelCase``
          (``$.message.task_id`` -> ``message.taskId``). Any other path is taken as
          already in wire form (e.g. a query parameter name) and passed unchanged.

        The result is a fresh dict of JSON-ready values (never shared, safe to mutate).

    Raises:
        Nothing: this runs on the error path and must not fail.
    """
    info: dict[str, Any] = {
        "@type": ERROR_INFO_TYPE,
        "reason": exc.reason,
        "domain": A2A_ERROR_DOMAIN,
    }
    if exc.metadata:
        info["metadata"] = {
            str(key): value if isinstance(value, str) else str(value)
            for key, value in exc.metadata.items()
        }
    details: list[dict[str, Any]] = [info]
    if exc.field_violations:
        details.append(
            {
                "@type": BAD_REQUEST_TYPE,
                "fieldViolations": [
                    {"field": _wire_field_path(field), "description": description}
                    for field, description in exc.field_violations
                ],
            }
        )
    return {
        "error": {
            "code": exc.http_status,
            "status": exc.grpc_status,
            "message": exc.message,
            "details": details,
        }
    }


def error_headers(exc: TaskplaneError) -> dict[str, str]:
    """Extra response headers that go with ``exc`` (besides ``Content-Type``).

    Args:
        exc: the error being answered.

    Returns:
        A fresh dict, possibly empty:

        * ``Retry-After``: ``exc.retry_after_s`` in whole seconds (decimal string,
          RFC 9110 §10.2.3 delay-seconds) when it is set, e.g. on 503 ``Overloaded``.
        * ``WWW-Authenticate: Bearer realm="taskplane"`` on every 401 (RFC 9110
          §11.6.1 requires a challenge with 401).

    Raises:
        Nothing.
    """
    headers: dict[str, str] = {}
    if exc.retry_after_s is not None:
        headers["Retry-After"] = str(max(0, int(exc.retry_after_s)))
    if exc.http_status == 401:
        headers["WWW-Authenticate"] = BEARER_CHALLENGE
    return headers


def _wire_field_path(path: str) -> str:
    # The codec reports Python attribute paths (rule "strict decoding"); callers see the JSON names.
    if not path.startswith("$"):
        return path
    return _SNAKE_SEGMENT.sub(lambda m: m.group(1).upper(), path[1:].lstrip("."))
