"""Render a :class:`~taskplane.errors.TaskplaneError` as an A2A HTTP+JSON error response.

A2A v1.0.1 §11.6 (docs/conformance.md): every error answer, A2A
or not (401, unknown route, 405, 413, 415, malformed JSON included), is the
``google.rpc.Status`` fields wrapped in ``error``::

    {"error": {"code": 404, "status": "NOT_FOUND", "message": "...",
               "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                            "reason": "TASK_NOT_FOUND", "domain": "a2a-protocol.org",
                            "metadata": {"taskId": "..."}}]}}

The status line, ``code``, ``status`` and ``reason`` come from one table,
:data:`WIRE_IDENTITIES`, keyed by error class: the errors themselves know nothing of
HTTP (see :mod:`taskplane.errors` for the tree a caller picks a branch of). Design
rules "Pinned protocol source / Error format": every error body carries a
``google.rpc.ErrorInfo`` detail with ``domain: "a2a-protocol.org"``; A2A-defined
errors use the nine A2A reasons, the others the UPPER_SNAKE_CASE code name
(``INVALID_ARGUMENT``, ``UNAUTHENTICATED``...) or the design rules' own reasons
(``DUPLICATE_MESSAGE_ID``). This module is pure: no I/O, no trio, no Quart.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

import attrs

from taskplane.actors.outbound import DeliveryAmbiguous, DeliveryConflict, DeliveryFailed
from taskplane.errors import (
    ActorGone,
    DuplicateMessageId,
    Fenced,
    Internal,
    InvalidRequest,
    MethodNotAllowed,
    MethodNotImplemented,
    Overloaded,
    PayloadTooLarge,
    ProviderUnavailable,
    PushNotificationNotSupported,
    RequestTimeout,
    RouteNotFound,
    StoreLocked,
    StoreUnavailable,
    StoreVersionError,
    TaskNotCancelable,
    TaskNotFound,
    TaskplaneError,
    ToolError,
    Unauthenticated,
    UnsupportedMediaType,
    UnsupportedOperation,
    UpgradeNotSupported,
    VersionConflict,
    VersionNotSupported,
)

A2A_ERROR_DOMAIN: Final = "a2a-protocol.org"
ERROR_INFO_TYPE: Final = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST_TYPE: Final = "type.googleapis.com/google.rpc.BadRequest"
BEARER_CHALLENGE: Final = 'Bearer realm="taskplane"'

_SNAKE_SEGMENT = re.compile(r"_([a-z0-9])")


@attrs.frozen
class WireIdentity:
    """How one error class is answered on the wire.

    Attributes:
        http_status: the HTTP status code (int), also the body's ``code``.
        grpc_status: canonical ``google.rpc.Code`` name, e.g. ``"NOT_FOUND"``.
        reason: ``google.rpc.ErrorInfo.reason`` (UPPER_SNAKE_CASE).
    """

    http_status: int
    grpc_status: str
    reason: str


_UNAVAILABLE: Final = WireIdentity(503, "UNAVAILABLE", "UNAVAILABLE")
_INTERNAL: Final = WireIdentity(500, "INTERNAL", "INTERNAL")

WIRE_IDENTITIES: Final[Mapping[type[TaskplaneError], WireIdentity]] = {
    TaskplaneError: _INTERNAL,
    # generic (non-A2A) conditions
    InvalidRequest: WireIdentity(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT"),
    Unauthenticated: WireIdentity(401, "UNAUTHENTICATED", "UNAUTHENTICATED"),
    RouteNotFound: WireIdentity(404, "NOT_FOUND", "NOT_FOUND"),
    MethodNotAllowed: WireIdentity(405, "UNIMPLEMENTED", "METHOD_NOT_ALLOWED"),
    MethodNotImplemented: WireIdentity(501, "UNIMPLEMENTED", "METHOD_NOT_IMPLEMENTED"),
    RequestTimeout: WireIdentity(408, "DEADLINE_EXCEEDED", "REQUEST_TIMEOUT"),
    UpgradeNotSupported: WireIdentity(400, "INVALID_ARGUMENT", "UPGRADE_NOT_SUPPORTED"),
    DuplicateMessageId: WireIdentity(409, "ALREADY_EXISTS", "DUPLICATE_MESSAGE_ID"),
    PayloadTooLarge: WireIdentity(413, "INVALID_ARGUMENT", "PAYLOAD_TOO_LARGE"),
    UnsupportedMediaType: WireIdentity(415, "INVALID_ARGUMENT", "UNSUPPORTED_MEDIA_TYPE"),
    Overloaded: _UNAVAILABLE,
    StoreUnavailable: _UNAVAILABLE,
    ActorGone: _UNAVAILABLE,
    VersionConflict: WireIdentity(503, "UNAVAILABLE", "VERSION_CONFLICT"),
    Fenced: WireIdentity(503, "UNAVAILABLE", "FENCED"),
    Internal: _INTERNAL,
    StoreLocked: _INTERNAL,
    StoreVersionError: _INTERNAL,
    # A2A-defined errors (v1.0.1 HTTP column)
    TaskNotFound: WireIdentity(404, "NOT_FOUND", "TASK_NOT_FOUND"),
    TaskNotCancelable: WireIdentity(400, "FAILED_PRECONDITION", "TASK_NOT_CANCELABLE"),
    PushNotificationNotSupported: WireIdentity(
        501, "UNIMPLEMENTED", "PUSH_NOTIFICATION_NOT_SUPPORTED"
    ),
    UnsupportedOperation: WireIdentity(400, "FAILED_PRECONDITION", "UNSUPPORTED_OPERATION"),
    VersionNotSupported: WireIdentity(400, "FAILED_PRECONDITION", "VERSION_NOT_SUPPORTED"),
    # agent-side tool errors and outbound delivery (never answered to an A2A caller
    # today; listed so that every error class has one identity)
    ToolError: WireIdentity(400, "FAILED_PRECONDITION", "TOOL_ERROR"),
    DeliveryFailed: WireIdentity(502, "UNAVAILABLE", "DELIVERY_FAILED"),
    ProviderUnavailable: WireIdentity(503, "UNAVAILABLE", "AGENT_PROVIDER_UNAVAILABLE"),
    DeliveryAmbiguous: WireIdentity(502, "DATA_LOSS", "DELIVERY_AMBIGUOUS"),
    DeliveryConflict: WireIdentity(409, "ALREADY_EXISTS", "DELIVERY_CONFLICT"),
}
"""Error class -> its wire identity. A class not listed (a branch such as
``Transient``, or a subclass defined elsewhere) answers as its nearest listed base
class; :class:`~taskplane.errors.TaskplaneError` itself is ``500 INTERNAL``."""


def wire_identity(exc: TaskplaneError | type[TaskplaneError]) -> WireIdentity:
    """The :class:`WireIdentity` of an error (or an error class).

    Returns:
        the entry of :data:`WIRE_IDENTITIES` for the nearest class in the error's
        method resolution order (itself first).

    Raises:
        Nothing: every error has ``TaskplaneError`` in its MRO.
    """
    cls = exc if isinstance(exc, type) else type(exc)
    for base in cls.__mro__:
        identity = WIRE_IDENTITIES.get(base)
        if identity is not None:
            return identity
    return _INTERNAL


def error_body(exc: TaskplaneError) -> dict[str, Any]:
    """Build the §11.6 JSON error body for ``exc``.

    Args:
        exc: any taskplane error; its class fixes ``code``, ``status`` and ``reason``
            (:func:`wire_identity`); its instance carries the message, metadata and
            field violations.

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
    identity = wire_identity(exc)
    info: dict[str, Any] = {
        "@type": ERROR_INFO_TYPE,
        "reason": identity.reason,
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
            "code": identity.http_status,
            "status": identity.grpc_status,
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
    if wire_identity(exc).http_status == 401:
        headers["WWW-Authenticate"] = BEARER_CHALLENGE
    return headers


def _wire_field_path(path: str) -> str:
    # The codec reports Python attribute paths (rule "strict decoding"); callers see the JSON names.
    if not path.startswith("$"):
        return path
    return _SNAKE_SEGMENT.sub(lambda m: m.group(1).upper(), path[1:].lstrip("."))
