"""The taskplane error hierarchy and its A2A error identities.

Every error a caller can see is a :class:`TaskplaneError`. Each subclass fixes the
HTTP status, the canonical ``google.rpc.Code`` name and the ``google.rpc.ErrorInfo``
``reason`` used in the A2A v1.0.1 §11.6 error body. The HTTP layer
turns any of them into ``{"error": {code, status, message, details}}``; no other
module knows about HTTP.

Design rules "Pinned protocol source / Error format": every error body carries a
``google.rpc.ErrorInfo`` detail with ``domain: "a2a-protocol.org"``. A2A-defined
errors use the nine A2A reasons; the others use the UPPER_SNAKE_CASE code name
(``INVALID_ARGUMENT``, ``UNAUTHENTICATED``...) or the design rules' own reasons
(``DUPLICATE_MESSAGE_ID``).

This module imports nothing from the package (rule "import layers").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

A2A_ERROR_DOMAIN = "a2a-protocol.org"


class TaskplaneError(Exception):
    """Base of every error with a wire identity.

    Attributes:
        http_status: the HTTP status code (int) answered for this error.
        grpc_status: canonical ``google.rpc.Code`` name, e.g. ``"NOT_FOUND"``.
        reason: ``google.rpc.ErrorInfo.reason`` (UPPER_SNAKE_CASE).
        message: human-readable text (the exception's ``str``).
        metadata: ``ErrorInfo.metadata``: string keys to string values.
        field_violations: ``(field path, description)`` pairs, emitted as a
            ``google.rpc.BadRequest`` detail when non-empty.
        retry_after_s: seconds for a ``Retry-After`` header, or ``None``.
    """

    http_status = 500
    grpc_status = "INTERNAL"
    reason = "INTERNAL"

    def __init__(
        self,
        message: str,
        *,
        metadata: Mapping[str, str] | None = None,
        field_violations: Sequence[tuple[str, str]] = (),
        retry_after_s: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.metadata: dict[str, str] = dict(metadata or {})
        self.field_violations: tuple[tuple[str, str], ...] = tuple(field_violations)
        self.retry_after_s = retry_after_s


# --- generic (non-A2A) conditions -------------------------------------


class InvalidRequest(TaskplaneError):
    """400 ``INVALID_ARGUMENT``: malformed JSON, wrong type, missing field, bad value."""

    http_status = 400
    grpc_status = "INVALID_ARGUMENT"
    reason = "INVALID_ARGUMENT"


class Unauthenticated(TaskplaneError):
    """401 ``UNAUTHENTICATED``: missing or unknown bearer token."""

    http_status = 401
    grpc_status = "UNAUTHENTICATED"
    reason = "UNAUTHENTICATED"


class RouteNotFound(TaskplaneError):
    """404 ``NOT_FOUND``: no such route (not a Task lookup; see :class:`TaskNotFound`)."""

    http_status = 404
    grpc_status = "NOT_FOUND"
    reason = "NOT_FOUND"


class MethodNotAllowed(TaskplaneError):
    """405 ``UNIMPLEMENTED``: the route exists but not for this HTTP method."""

    http_status = 405
    grpc_status = "UNIMPLEMENTED"
    reason = "METHOD_NOT_ALLOWED"


class DuplicateMessageId(TaskplaneError):
    """409 ``ALREADY_EXISTS``: a messageId was reused with a different payload.

    Design rules "Contract decisions": never a silent replay.
    """

    http_status = 409
    grpc_status = "ALREADY_EXISTS"
    reason = "DUPLICATE_MESSAGE_ID"


class PayloadTooLarge(TaskplaneError):
    """413 ``INVALID_ARGUMENT``: the request body is over the 1 MiB limit."""

    http_status = 413
    grpc_status = "INVALID_ARGUMENT"
    reason = "PAYLOAD_TOO_LARGE"


class UnsupportedMediaType(TaskplaneError):
    """415 ``INVALID_ARGUMENT``: the request ``Content-Type`` is not JSON."""

    http_status = 415
    grpc_status = "INVALID_ARGUMENT"
    reason = "UNSUPPORTED_MEDIA_TYPE"


class Overloaded(TaskplaneError):
    """503 ``UNAVAILABLE``: a bounded inbox is full; retry after ``retry_after_s``."""

    http_status = 503
    grpc_status = "UNAVAILABLE"
    reason = "UNAVAILABLE"

    def __init__(self, message: str, *, retry_after_s: int = 1, **kw: object) -> None:
        super().__init__(message, retry_after_s=retry_after_s, **kw)  # type: ignore[arg-type]


class StoreUnavailable(TaskplaneError):
    """503 ``UNAVAILABLE``: the durable store could not commit (disk full, I/O, locked).

    Nothing was recorded; the same request may be retried.
    """

    http_status = 503
    grpc_status = "UNAVAILABLE"
    reason = "UNAVAILABLE"

    def __init__(self, message: str, *, retry_after_s: int = 1, **kw: object) -> None:
        super().__init__(message, retry_after_s=retry_after_s, **kw)  # type: ignore[arg-type]


class Internal(TaskplaneError):
    """500 ``INTERNAL``: a bug or an unexpected failure."""


class ActorGone(TaskplaneError):
    """503 ``UNAVAILABLE``: the actor asked for a reply crashed or stopped before replying."""

    http_status = 503
    grpc_status = "UNAVAILABLE"
    reason = "UNAVAILABLE"


class StoreLocked(TaskplaneError):
    """Another process holds the store root's exclusive lock (startup only)."""


class StoreVersionError(TaskplaneError):
    """The store was written by a newer taskplane (schema_version too high)."""


# --- A2A-defined errors (v1.0.1 HTTP column) ----------------------------


class TaskNotFound(TaskplaneError):
    """404 ``TASK_NOT_FOUND``: unknown Task, or one the caller may not see (§13.1)."""

    http_status = 404
    grpc_status = "NOT_FOUND"
    reason = "TASK_NOT_FOUND"


class TaskNotCancelable(TaskplaneError):
    """400 ``TASK_NOT_CANCELABLE``: the Task is already terminal."""

    http_status = 400
    grpc_status = "FAILED_PRECONDITION"
    reason = "TASK_NOT_CANCELABLE"


class PushNotificationNotSupported(TaskplaneError):
    """501 ``PUSH_NOTIFICATION_NOT_SUPPORTED`` (docs/conformance.md)."""

    http_status = 501
    grpc_status = "UNIMPLEMENTED"
    reason = "PUSH_NOTIFICATION_NOT_SUPPORTED"


class UnsupportedOperation(TaskplaneError):
    """400 ``UNSUPPORTED_OPERATION``: e.g. a message to, or subscribe on, a terminal Task."""

    http_status = 400
    grpc_status = "FAILED_PRECONDITION"
    reason = "UNSUPPORTED_OPERATION"


class VersionNotSupported(TaskplaneError):
    """400 ``VERSION_NOT_SUPPORTED``: ``A2A-Version`` other than 1.0 (docs/conformance.md)."""

    http_status = 400
    grpc_status = "FAILED_PRECONDITION"
    reason = "VERSION_NOT_SUPPORTED"


# --- agent-side tool errors (bridge) -------------------------------------------------


class ToolError(TaskplaneError):
    """A task tool refused a call (no authority, terminal Task, invalid arguments).

    Raised to the agent runtime, never to an A2A caller.
    """

    http_status = 400
    grpc_status = "FAILED_PRECONDITION"
    reason = "TOOL_ERROR"
