"""The JSON-RPC 2.0 binding of A2A v1.0.1 (§9): its framing and its errors, nothing else.

The binding is served at ``POST /`` of the base URL, beside the HTTP+JSON routes, over
the same :class:`~taskplane.http.handlers.Handlers`. The payloads are the same ProtoJSON
messages, so one codec serves both bindings; this module only

* reads the envelope ``{"jsonrpc": "2.0", "id", "method", "params"}``
  (:func:`parse_envelope`) and turns it into the binding-free
  :class:`~taskplane.http.handlers.Call` the HTTP+JSON route would have made
  (:func:`call_of`): ``params`` is the request message; its ``id`` (a Task ID) is the
  path's ``{id}``; the fields the HTTP+JSON binding carries in the query string
  (``GetTask``, ``ListTasks``) become that query; ``params.tenant`` is the tenant (the
  ``tenant`` of the card's interface, §4.4 "routing identifier");
* wraps a result as ``{"jsonrpc": "2.0", "id", "result"}`` (:func:`result_payload`)
  and each SSE frame of a streaming method as one such response (:func:`rpc_frames`,
  §9.4.2);
* renders every error as a JSON-RPC error object (:func:`error_payload`, §9.5): the
  A2A code of its ``google.rpc.ErrorInfo`` reason, the message, and ``data`` holding the
  same detail objects as the §11.6 body (``ErrorInfo`` first, then any
  ``google.rpc.BadRequest``), so a client reads the same reason on both bindings.

Decisions (docs/http-api.md, "JSON-RPC"): a batch (a JSON array) is refused with one
``-32600`` error, id ``null`` (A2A defines no batch semantics; the official SDK
servers refuse them too); a notification (no ``id``) is refused with ``-32600`` and id
``null``, since every A2A method answers with something the caller needs (a Task ID
at least), so a call nobody waits for is a client mistake, and refusing it records
nothing. Errors are answered HTTP 200, except the transport's own conditions
(:data:`TRANSPORT_STATUSES`: 401 with its challenge, 413, 415, 503 with
``Retry-After``), which keep their HTTP status so proxies, retry policies and
HTTP-level clients read them as they would on any other route.

Pure: no I/O, no trio, no Quart.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Final

import attrs

from taskplane.errors import InvalidRequest, TaskplaneError
from taskplane.http.body import NestedTooDeeply, load_json
from taskplane.http.errors import error_body, wire_identity
from taskplane.http.handlers import Call
from taskplane.http.query import GET_TASK_PARAMS, LIST_TASKS_PARAMS
from taskplane.http.routing import Operation, is_tenant
from taskplane.http.sse import sse_frame
from taskplane.model.wire import wire_name
from taskplane.scope import Scope

PATH: Final = "/"
"""Where the binding is served (the interface URL itself)."""

METHODS: Final[Mapping[str, Operation]] = {
    "SendMessage": "send",
    "SendStreamingMessage": "stream",
    "GetTask": "get",
    "ListTasks": "list",
    "CancelTask": "cancel",
    "SubscribeToTask": "subscribe",
    "CreateTaskPushNotificationConfig": "push",
    "GetTaskPushNotificationConfig": "push",
    "ListTaskPushNotificationConfigs": "push",
    "DeleteTaskPushNotificationConfig": "push",
    "GetExtendedAgentCard": "extended_card",
}
"""The proto service's methods (``lf.a2a.v1.A2AService``), by their JSON-RPC name."""
SEND_METHODS: Final = frozenset({"SendMessage", "SendStreamingMessage"})
"""The methods that send a message (what the early refusal looks at)."""

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
SERVER_ERROR: Final = -32000
"""JSON-RPC 2.0's implementation-defined server error: conditions A2A gives no code
(``UNAUTHENTICATED``, ``DUPLICATE_MESSAGE_ID``, ``UNAVAILABLE``); ``data``'s
``ErrorInfo.reason`` tells which."""

A2A_CODES: Final[Mapping[str, int]] = {
    "TASK_NOT_FOUND": -32001,
    "TASK_NOT_CANCELABLE": -32002,
    "PUSH_NOTIFICATION_NOT_SUPPORTED": -32003,
    "UNSUPPORTED_OPERATION": -32004,
    "CONTENT_TYPE_NOT_SUPPORTED": -32005,
    "INVALID_AGENT_RESPONSE": -32006,
    "EXTENDED_AGENT_CARD_NOT_CONFIGURED": -32007,
    "EXTENSION_SUPPORT_REQUIRED": -32008,
    "VERSION_NOT_SUPPORTED": -32009,
    "PAYLOAD_TOO_LARGE": INVALID_REQUEST,
    "UNSUPPORTED_MEDIA_TYPE": -32005,
}
"""The JSON-RPC code of an ``ErrorInfo`` reason: A2A's nine (§10.1), and the request's
own framing faults: too large is an invalid request; a request ``Content-Type`` that is
not JSON is ``ContentTypeNotSupportedError`` (as the a2a-tck and the SDKs read it)."""
STATUS_CODES: Final[Mapping[str, int]] = {
    "INVALID_ARGUMENT": INVALID_PARAMS,
    "INTERNAL": INTERNAL_ERROR,
}
"""The JSON-RPC code of any other error, by its ``google.rpc.Code`` name; the rest are
:data:`SERVER_ERROR`."""
TRANSPORT_STATUSES: Final = frozenset({401, 413, 415, 503})
"""HTTP statuses a JSON-RPC error keeps; every other error is answered HTTP 200."""

RequestId = str | int | None
"""A JSON-RPC request ``id``: a string, an integer, or ``null``."""


class EnvelopeError(InvalidRequest):
    """``-32600``: the body is JSON but not one JSON-RPC 2.0 request object."""

    rpc_code = INVALID_REQUEST


class ParseError(EnvelopeError):
    """``-32700``: the body is not JSON."""

    rpc_code = PARSE_ERROR


class MethodNotFound(EnvelopeError):
    """``-32601``: a method the A2A service does not have."""

    rpc_code = METHOD_NOT_FOUND


@attrs.frozen
class Envelope:
    """One JSON-RPC request: its ``id``, ``method`` (a key of :data:`METHODS`) and
    ``params`` (``{}`` when absent)."""

    id: RequestId
    method: str
    params: Mapping[str, Any]

    @property
    def operation(self) -> Operation:
        """The operation the method names."""
        return METHODS[self.method]


def parse_json(raw: bytes) -> Any:
    """The request body as JSON.

    Raises:
        ParseError: not UTF-8 JSON (an empty body included).
        EnvelopeError: (``-32600``, ``INVALID_ARGUMENT``) nested deeper than any request
            body may be (the HTTP+JSON bound, :func:`~taskplane.http.body.load_json`): the
            JSON is well formed, the request exceeds a limit, as a too-large one does.
    """
    try:
        return load_json(raw)
    except NestedTooDeeply as exc:
        raise EnvelopeError(exc.message) from None
    except ValueError as exc:  # UnicodeDecodeError is a ValueError
        raise ParseError(f"the request body is not JSON: {exc}") from None


def request_id(document: Any) -> RequestId:
    """The ``id`` a response to ``document`` carries: its own when it is a string or an
    integer, else ``null`` (a batch, a notification, a malformed id)."""
    if not isinstance(document, dict):
        return None
    value = document.get("id")
    return value if isinstance(value, str | int) and not isinstance(value, bool) else None


def parse_envelope(document: Any) -> Envelope:
    """Check ``document`` (the parsed body) is one JSON-RPC 2.0 call of an A2A method.

    Raises:
        EnvelopeError: a batch, not an object, ``jsonrpc`` other than ``"2.0"``, no
            ``id`` (a notification) or one not a string/integer/``null``, ``method``
            not a string, ``params`` not an object.
        MethodNotFound: a method not in :data:`METHODS`.
    """
    if isinstance(document, list):
        raise EnvelopeError("batch requests are not supported: send one request per call")
    if not isinstance(document, dict):
        raise EnvelopeError("the request must be a JSON-RPC 2.0 request object")
    if document.get("jsonrpc") != "2.0":
        raise EnvelopeError('the request must have "jsonrpc": "2.0"')
    if "id" not in document:
        raise EnvelopeError(
            "notifications are not supported: every A2A method has a result; send an id"
        )
    identifier = document["id"]
    if identifier is not None and (
        isinstance(identifier, bool) or not isinstance(identifier, str | int)
    ):
        raise EnvelopeError("id must be a string, an integer or null")
    method = document.get("method")
    if not isinstance(method, str):
        raise EnvelopeError("method must be a string")
    if method not in METHODS:
        raise MethodNotFound(
            f"method {method[:64]!r} does not exist; the methods are: {', '.join(METHODS)}"
        )
    params = document.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise InvalidRequest(
            "params must be an object (the method's request message)",
            field_violations=[("params", "must be an object")],
        )
    return Envelope(identifier, method, params)


_QUERY_OPERATIONS: Final = frozenset({"get", "list"})
"""Operations whose request fields the HTTP+JSON binding reads from the query string."""
_TASK_OPERATIONS: Final = frozenset({"get", "cancel", "subscribe"})
"""Operations whose request names a Task by ``id``."""


def call_of(envelope: Envelope, principal: str, extensions: tuple[str, ...]) -> Call:
    """The :class:`Call` the HTTP+JSON route of the same request would make.

    Raises:
        InvalidRequest: ``tenant`` not a tenant identifier or one the HTTP+JSON path
            grammar reserves (:func:`~taskplane.http.routing.is_tenant`), ``id`` missing or not a
            non-empty string where the method names a Task, a query field of
            ``GetTask``/``ListTasks`` that is not a string, integer or boolean.
    """
    params = dict(envelope.params)
    tenant = params.pop("tenant", None)
    if tenant is None:
        tenant = ""
    if not isinstance(tenant, str) or (tenant and not is_tenant(tenant)):
        raise InvalidRequest(
            "params.tenant must be a tenant identifier",
            field_violations=[
                (
                    "tenant",
                    "must match [A-Za-z0-9][A-Za-z0-9._:-]{0,127} and not be a reserved"
                    " path segment (message:send, message:stream, tasks, extendedAgentCard,"
                    " .well-known, console)",
                )
            ],
        )
    operation = envelope.operation
    task_id: str | None = None
    if operation in _TASK_OPERATIONS:
        task_id = params.pop("id", None)
        if not isinstance(task_id, str) or not task_id:
            raise InvalidRequest(
                f"{envelope.method} needs params.id, the Task ID (a non-empty string)",
                field_violations=[("id", "required: a non-empty string")],
            )
    body: Mapping[str, Any] = params
    query: dict[str, list[str]] = {}
    if operation in _QUERY_OPERATIONS:
        known = GET_TASK_PARAMS if operation == "get" else LIST_TASKS_PARAMS
        query = {name: _query_values(name, value, known) for name, value in params.items()}
        query = {name: values for name, values in query.items() if values}
        body = {}
    return Call(Scope(tenant, principal), task_id, body, query, extensions)


def _query_values(name: str, value: Any, known: frozenset[str]) -> list[str]:
    """A ProtoJSON scalar as the query string spells it (§11.5): decimal numbers,
    ``true``/``false``, strings as they are; ``null`` is absent. An unknown field is
    kept, whatever its value, to be ignored and counted as the query's are."""
    if value is None:
        return []
    if isinstance(value, bool):
        return ["true" if value else "false"]
    if isinstance(value, int | str):
        return [str(value)]
    if not known.intersection({name, wire_name(name)}):
        return [""]
    raise InvalidRequest(
        f"params.{name[:64]} must be a string, an integer or a boolean",
        field_violations=[(name, "must be a string, an integer or a boolean")],
    )


def result_payload(identifier: RequestId, result: Mapping[str, Any]) -> bytes:
    """``{"jsonrpc": "2.0", "id", "result"}`` as compact JSON bytes."""
    return _compact({"jsonrpc": "2.0", "id": identifier, "result": result})


def rpc_code(exc: TaskplaneError) -> int:
    """The JSON-RPC code answered for ``exc`` (see :data:`A2A_CODES`)."""
    own = getattr(exc, "rpc_code", None)
    if isinstance(own, int):
        return own
    identity = wire_identity(exc)
    return _code(identity.reason, identity.grpc_status)


def _code(reason: str, status: str) -> int:
    return A2A_CODES.get(reason) or STATUS_CODES.get(status, SERVER_ERROR)


def error_object(exc: TaskplaneError) -> dict[str, Any]:
    """The JSON-RPC error object of ``exc``: ``{"code", "message", "data"}``, where
    ``data`` is the list of detail objects of its §11.6 body (``ErrorInfo`` first)."""
    status = error_body(exc)["error"]
    return {"code": rpc_code(exc), "message": exc.message, "data": status["details"]}


def error_payload(identifier: RequestId, exc: TaskplaneError) -> bytes:
    """``{"jsonrpc": "2.0", "id", "error"}`` for ``exc``, as compact JSON bytes."""
    return _compact({"jsonrpc": "2.0", "id": identifier, "error": error_object(exc)})


def http_status(exc: TaskplaneError) -> int:
    """The HTTP status of a JSON-RPC error answer: 200, or a transport status."""
    status = wire_identity(exc).http_status
    return status if status in TRANSPORT_STATUSES else 200


def _from_status(status: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON-RPC error object from a §11.6 ``error`` object (an SSE error frame)."""
    details: Sequence[Any] = status.get("details") or []
    info = details[0] if details and isinstance(details[0], dict) else {}
    code = _code(str(info.get("reason", "")), str(status.get("status", "")))
    return {"code": code, "message": status.get("message", ""), "data": list(details)}


_DATA: Final = b"data: "
_ERROR_EVENT: Final = b"event: error\n" + _DATA


async def rpc_frames(frames: AsyncIterator[bytes], identifier: RequestId) -> AsyncIterator[bytes]:
    """The SSE bytes of a streaming method: each ``data:`` frame of ``frames`` (one
    StreamResponse) as the ``result`` of a JSON-RPC response with ``identifier``, an
    error frame (``event: error``, a §11.6 body) as a JSON-RPC error response, comments
    as they are (§9.4.2). A StreamResponse frame is wrapped without being parsed again:
    its bytes, shared by every subscriber (:class:`~taskplane.http.fanout.FrameEncoder`),
    are framed by a prefix and a suffix."""
    prefix = b'data: {"jsonrpc":"2.0","id":' + _compact(identifier) + b',"result":'
    async for chunk in frames:
        parts: list[bytes] = []
        for event in chunk.split(b"\n\n"):
            if event.startswith(_ERROR_EVENT):
                status = json.loads(event[len(_ERROR_EVENT) :]).get("error", {})
                response = {"jsonrpc": "2.0", "id": identifier, "error": _from_status(status)}
                parts.append(sse_frame(response))
            elif event.startswith(_DATA):
                parts.append(prefix + event[len(_DATA) :] + b"}\n\n")
            elif event:
                parts.append(event + b"\n\n")
        yield b"".join(parts)


def _compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()
