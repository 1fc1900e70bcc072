"""A2A 0.3 compatibility (``TASKPLANE_A2A_COMPAT=0.3``): the 0.3 JSON-RPC binding,
translated at the edge to the 1.0 one, both ways.

The handlers and the plane speak A2A 1.0 only. With the setting on, a JSON-RPC call at
``POST /`` whose ``A2A-Version`` is absent, empty or ``0.3`` (§3.6.2: absent means 0.3)
is read here as 0.3 and answered in 0.3 shapes; a ``1.0`` call is untouched. This module

* renames the 0.3 methods (:data:`METHODS`, ``message/send`` ...) to their 1.0 names
  and turns their params into the 1.0 request messages (:func:`request_document`);
* turns each 1.0 result, and each SSE frame of a streaming method, back into its 0.3
  shape (:func:`result`, :func:`frames`);
* adds the 0.3 Agent Card fields beside the 1.0 ones (:func:`card`).

The 0.3 HTTP+JSON binding (``/v1/...``, the 0.3 protobuf's JSON) is translated to and
from these 0.3 JSON-RPC shapes by :mod:`taskplane.http.compat03_rest`.

Shapes (0.3 ← → 1.0):

* parts: ``{"kind": "text", "text"}`` ↔ ``{"text"}``; ``{"kind": "file", "file":
  {"bytes"|"uri", "mimeType", "name"}}`` ↔ ``{"raw"|"url", "mediaType", "filename"}``;
  ``{"kind": "data", "data": {...}}`` ↔ ``{"data"}`` (a 1.0 ``data`` that is not an
  object is sent to 0.3 as ``{"value": data}``, since 0.3 data parts hold objects);
* ``role``: ``"user"``/``"agent"`` ↔ ``ROLE_USER``/``ROLE_AGENT``; ``TaskState``:
  ``"input-required"`` ↔ ``TASK_STATE_INPUT_REQUIRED`` (``"unknown"`` ↔
  ``TASK_STATE_UNSPECIFIED``);
* Message, Task and the stream events carry ``kind`` (``message``, ``task``,
  ``status-update``, ``artifact-update``); a status update carries ``final``, true
  for a terminal or interrupted state;
* ``configuration.blocking: false`` ↔ ``configuration.returnImmediately: true``;
  ``pushNotificationConfig`` ↔ ``taskPushNotificationConfig``;
* the results of ``SendMessage`` (``{"task"}``/``{"message"}``) and of the stream
  (``StreamResponse``) are the bare 0.3 object.

Errors keep their JSON-RPC form: the A2A codes -32001..-32007 mean the same in 0.3, and
``data`` (free in 0.3) holds the 1.0 detail objects. Unknown fields pass through to the
1.0 decoder, which ignores them (§5.7).

Pure: no I/O, no trio, no Quart.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any, Final

from taskplane.errors import InvalidRequest
from taskplane.http.jsonrpc import METHODS as V1_METHODS
from taskplane.http.jsonrpc import MethodNotFound

VERSION: Final = "0.3"
"""The ``A2A-Version`` this module serves."""
CARD_PROTOCOL_VERSION: Final = "0.3.0"
"""The 0.3 card's ``protocolVersion``."""

METHODS: Final[Mapping[str, str]] = {
    "message/send": "SendMessage",
    "message/stream": "SendStreamingMessage",
    "tasks/get": "GetTask",
    "tasks/cancel": "CancelTask",
    "tasks/resubscribe": "SubscribeToTask",
    "tasks/pushNotificationConfig/set": "CreateTaskPushNotificationConfig",
    "tasks/pushNotificationConfig/get": "GetTaskPushNotificationConfig",
    "tasks/pushNotificationConfig/list": "ListTaskPushNotificationConfigs",
    "tasks/pushNotificationConfig/delete": "DeleteTaskPushNotificationConfig",
    "agent/getAuthenticatedExtendedCard": "GetExtendedAgentCard",
}
"""The 0.3 JSON-RPC methods, by the 1.0 method each is served as."""

_STATES: Final[Mapping[str, str]] = {
    "submitted": "TASK_STATE_SUBMITTED",
    "working": "TASK_STATE_WORKING",
    "input-required": "TASK_STATE_INPUT_REQUIRED",
    "completed": "TASK_STATE_COMPLETED",
    "canceled": "TASK_STATE_CANCELED",
    "failed": "TASK_STATE_FAILED",
    "rejected": "TASK_STATE_REJECTED",
    "auth-required": "TASK_STATE_AUTH_REQUIRED",
    "unknown": "TASK_STATE_UNSPECIFIED",
}
_STATES_03: Final = {new: old for old, new in _STATES.items()}
_ROLES: Final[Mapping[str, str]] = {"user": "ROLE_USER", "agent": "ROLE_AGENT"}
_ROLES_03: Final = {new: old for old, new in _ROLES.items()}
_FINAL_STATES: Final = frozenset(
    {"completed", "canceled", "failed", "rejected", "input-required", "auth-required"}
)
"""0.3 states after which a status update is ``final`` (the stream ends there)."""


# --- 0.3 -> 1.0 (requests) -------------------------------------------------------------


def names_v1_method(document: Any) -> bool:
    """``document`` calls a 1.0 method (``SendMessage`` ...): the method names are
    disjoint, so a 1.0 client that sent no ``A2A-Version`` is still served as 1.0."""
    return isinstance(document, dict) and document.get("method") in V1_METHODS


def request_document(document: Any) -> Any:
    """A 0.3 JSON-RPC request as the 1.0 request it is served as: ``method`` renamed,
    ``params`` translated. Anything that is not a request object with a string method
    is returned as it is, for :func:`taskplane.http.jsonrpc.parse_envelope` to refuse.

    Raises:
        MethodNotFound: a method that is not a 0.3 method (:data:`METHODS`).
        InvalidRequest: a part without a known ``kind``, a file part without ``bytes``
            or ``uri``, a ``role`` or ``state`` that 0.3 does not have.
    """
    if not isinstance(document, dict) or not isinstance(document.get("method"), str):
        return document
    method = document["method"]
    if method not in METHODS:
        raise MethodNotFound(
            f"method {method[:64]!r} does not exist in A2A 0.3; "
            f"the methods are: {', '.join(METHODS)}"
        )
    translated = dict(document, method=METHODS[method])
    params = document.get("params")
    if isinstance(params, dict):
        translated["params"] = request_params(METHODS[method], params)
    return translated


def request_params(method: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The 1.0 request message of a 0.3 call of ``method`` (its 1.0 name).

    Raises:
        InvalidRequest: as :func:`request_document`.
    """
    out = dict(params)
    if method in ("SendMessage", "SendStreamingMessage"):
        if isinstance(out.get("message"), dict):
            out["message"] = message_to_v1(out["message"])
        if isinstance(out.get("configuration"), dict):
            out["configuration"] = _configuration_to_v1(out["configuration"])
    elif method == "GetTask":
        out.pop("metadata", None)
    elif method == "SubscribeToTask":
        out.pop("metadata", None)
    elif method == "CreateTaskPushNotificationConfig":
        config = out.pop("pushNotificationConfig", None)
        if isinstance(config, dict):
            out.update(_push_config_to_v1(config))
    elif method in ("GetTaskPushNotificationConfig", "DeleteTaskPushNotificationConfig"):
        out.pop("metadata", None)
        out["taskId"] = out.pop("id", None)
        config_id = out.pop("pushNotificationConfigId", None)
        if config_id is not None:
            out["id"] = config_id
    elif method == "ListTaskPushNotificationConfigs":
        out.pop("metadata", None)
        out["taskId"] = out.pop("id", None)
    return out


def message_to_v1(message: Mapping[str, Any]) -> dict[str, Any]:
    """A 0.3 Message (``kind: "message"``, ``role: "user"``, ``kind``-tagged parts) in
    ProtoJSON 1.0.

    Raises:
        InvalidRequest: an unknown role or part kind.
    """
    out = {key: value for key, value in message.items() if key != "kind"}
    role = message.get("role")
    if isinstance(role, str):
        if role not in _ROLES:
            raise InvalidRequest(
                f"message.role {role[:32]!r} is not an A2A 0.3 role (user, agent)",
                field_violations=[("message.role", "must be user or agent")],
            )
        out["role"] = _ROLES[role]
    parts = message.get("parts")
    if isinstance(parts, list):
        out["parts"] = [_part_to_v1(part, f"message.parts[{i}]") for i, part in enumerate(parts)]
    return out


def _part_to_v1(part: Any, where: str) -> Any:
    if not isinstance(part, dict):
        return part
    kind = part.get("kind")
    out: dict[str, Any] = {k: v for k, v in part.items() if k not in ("kind", "file")}
    if kind == "text" or (kind is None and "text" in part):
        return out
    if kind == "data" or (kind is None and "data" in part):
        return out
    if kind == "file" or (kind is None and "file" in part):
        file = part.get("file")
        if isinstance(file, dict) and ("bytes" in file or "uri" in file):
            if "bytes" in file:
                out["raw"] = file["bytes"]
            else:
                out["url"] = file["uri"]
            if file.get("mimeType") is not None:
                out["mediaType"] = file["mimeType"]
            if file.get("name") is not None:
                out["filename"] = file["name"]
            return out
        raise InvalidRequest(
            f"{where}.file must hold bytes or uri",
            field_violations=[(f"{where}.file", "must hold bytes or uri")],
        )
    raise InvalidRequest(
        f"{where}.kind must be text, file or data",
        field_violations=[(f"{where}.kind", "must be text, file or data")],
    )


def _configuration_to_v1(configuration: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(configuration)
    blocking = out.pop("blocking", None)
    if blocking is False:
        out["returnImmediately"] = True
    push = out.pop("pushNotificationConfig", None)
    if isinstance(push, dict):
        out["taskPushNotificationConfig"] = _push_config_to_v1(push)
    return out


def _push_config_to_v1(config: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(config)
    auth = out.get("authentication")
    if isinstance(auth, dict):
        schemes = auth.get("schemes")
        scheme = schemes[0] if isinstance(schemes, list) and schemes else auth.get("scheme")
        out["authentication"] = {
            key: value
            for key, value in (("scheme", scheme), ("credentials", auth.get("credentials")))
            if value is not None
        }
    return out


# --- 1.0 -> 0.3 (answers) --------------------------------------------------------------


def result(method: str, body: Mapping[str, Any]) -> Any:
    """The 0.3 result of the 1.0 ``body`` answered to ``method`` (its 1.0 name)."""
    if method in ("SendMessage", "SendStreamingMessage"):
        return stream_event(body)
    if method in ("GetTask", "CancelTask", "SubscribeToTask"):
        return task_to_v03(body)
    if method in ("CreateTaskPushNotificationConfig", "GetTaskPushNotificationConfig"):
        return _push_config_to_v03(body)
    if method == "ListTaskPushNotificationConfigs":
        configs = body.get("configs") or []
        return [_push_config_to_v03(config) for config in configs]
    if method == "DeleteTaskPushNotificationConfig":
        return None
    if method == "GetExtendedAgentCard":
        return card(body)
    return dict(body)


def stream_event(response: Mapping[str, Any]) -> Any:
    """A 1.0 ``SendMessageResponse`` or ``StreamResponse`` (one of ``task``,
    ``message``, ``statusUpdate``, ``artifactUpdate``) as the bare 0.3 object."""
    if isinstance(response.get("task"), dict):
        return task_to_v03(response["task"])
    if isinstance(response.get("message"), dict):
        return message_to_v03(response["message"])
    if isinstance(response.get("statusUpdate"), dict):
        update = response["statusUpdate"]
        status = _status_to_v03(update.get("status") or {})
        return {
            "kind": "status-update",
            **{k: v for k, v in update.items() if k != "status"},
            "status": status,
            "final": status.get("state") in _FINAL_STATES,
        }
    if isinstance(response.get("artifactUpdate"), dict):
        update = response["artifactUpdate"]
        return {
            "kind": "artifact-update",
            **update,
            "artifact": _artifact_to_v03(update.get("artifact") or {}),
        }
    return dict(response)


def task_to_v03(task: Mapping[str, Any]) -> dict[str, Any]:
    """A 1.0 Task as a 0.3 Task (``kind: "task"``, lower-case state, 0.3 parts)."""
    out: dict[str, Any] = {"kind": "task", **task}
    out["status"] = _status_to_v03(task.get("status") or {})
    if isinstance(task.get("history"), list):
        out["history"] = [message_to_v03(message) for message in task["history"]]
    if isinstance(task.get("artifacts"), list):
        out["artifacts"] = [_artifact_to_v03(artifact) for artifact in task["artifacts"]]
    return out


def message_to_v03(message: Mapping[str, Any]) -> dict[str, Any]:
    """A 1.0 Message as a 0.3 Message (``kind: "message"``, ``role: "agent"``, parts
    with ``kind``)."""
    out: dict[str, Any] = {"kind": "message", **message}
    role = message.get("role")
    if isinstance(role, str):
        out["role"] = _ROLES_03.get(role, role)
    out["parts"] = [_part_to_v03(part) for part in message.get("parts") or []]
    return out


def _status_to_v03(status: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(status)
    state = status.get("state")
    out["state"] = _STATES_03.get(state, "unknown") if isinstance(state, str) else "unknown"
    if isinstance(status.get("message"), dict):
        out["message"] = message_to_v03(status["message"])
    return out


def _artifact_to_v03(artifact: Mapping[str, Any]) -> dict[str, Any]:
    return {**artifact, "parts": [_part_to_v03(part) for part in artifact.get("parts") or []]}


def _part_to_v03(part: Mapping[str, Any]) -> dict[str, Any]:
    common = {k: part[k] for k in ("metadata",) if k in part}
    if "text" in part:
        return {"kind": "text", "text": part["text"], **common}
    if "raw" in part or "url" in part:
        file: dict[str, Any] = {"bytes": part["raw"]} if "raw" in part else {"uri": part["url"]}
        if "mediaType" in part:
            file["mimeType"] = part["mediaType"]
        if "filename" in part:
            file["name"] = part["filename"]
        return {"kind": "file", "file": file, **common}
    data = part.get("data")
    return {"kind": "data", "data": data if isinstance(data, dict) else {"value": data}, **common}


def _push_config_to_v03(config: Mapping[str, Any]) -> dict[str, Any]:
    inner = {k: v for k, v in config.items() if k not in ("taskId", "tenant")}
    auth = inner.get("authentication")
    if isinstance(auth, dict):
        inner["authentication"] = {
            "schemes": [auth["scheme"]] if "scheme" in auth else [],
            **({"credentials": auth["credentials"]} if "credentials" in auth else {}),
        }
    return {"taskId": config.get("taskId", ""), "pushNotificationConfig": inner}


async def frames(rpc_frames: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The SSE bytes of a 0.3 streaming method: each ``data:`` frame of
    ``rpc_frames`` (a JSON-RPC response whose ``result`` is a 1.0 ``StreamResponse``,
    from :func:`taskplane.http.jsonrpc.rpc_frames`) with its result as the 0.3 event;
    error responses and comments as they are."""
    async for chunk in rpc_frames:
        parts: list[bytes] = []
        for event in chunk.split(b"\n\n"):
            if event.startswith(b"data: "):
                response = json.loads(event[len(b"data: ") :])
                if isinstance(response.get("result"), dict):
                    response["result"] = stream_event(response["result"])
                parts.append(b"data: " + _compact(response) + b"\n\n")
            elif event:
                parts.append(event + b"\n\n")
        yield b"".join(parts)


# --- the Agent Card --------------------------------------------------------------------


def card(card_json: Mapping[str, Any]) -> dict[str, Any]:
    """The 1.0 Agent Card with the 0.3 fields added beside its own: ``protocolVersion``
    (``0.3.0``), ``url`` and ``preferredTransport`` (the JSON-RPC interface),
    ``additionalInterfaces`` (JSON-RPC, and HTTP+JSON at the same URL: its 0.3 paths
    are ``/v1/...``), ``supportsAuthenticatedExtendedCard``,
    ``security`` (0.3's ``[{scheme: [scopes]}]``) and each security scheme's 0.3
    ``type``-tagged fields. A 1.0 client ignores them (§5.7); a 0.3 client ignores the
    1.0 ones."""
    out = dict(card_json)
    interfaces = [i for i in card_json.get("supportedInterfaces") or [] if isinstance(i, dict)]
    jsonrpc = [i for i in interfaces if i.get("protocolBinding") == "JSONRPC"]
    url = (jsonrpc or interfaces or [{"url": ""}])[0].get("url", "")
    out["protocolVersion"] = CARD_PROTOCOL_VERSION
    out["url"] = url
    out["preferredTransport"] = "JSONRPC"
    out["additionalInterfaces"] = [
        {"url": url, "transport": "JSONRPC"},
        {"url": url, "transport": "HTTP+JSON"},  # at /v1/... (taskplane.http.compat03_rest)
    ]
    capabilities = card_json.get("capabilities")
    extended = isinstance(capabilities, dict) and capabilities.get("extendedAgentCard") is True
    out["supportsAuthenticatedExtendedCard"] = extended
    requirements = card_json.get("securityRequirements")
    if isinstance(requirements, list):
        out["security"] = [
            {name: list((scopes or {}).get("list") or []) for name, scopes in schemes.items()}
            for requirement in requirements
            if isinstance(schemes := requirement.get("schemes"), dict)
        ]
    schemes = card_json.get("securitySchemes")
    if isinstance(schemes, dict):
        out["securitySchemes"] = {
            name: _scheme_with_v03(scheme) if isinstance(scheme, dict) else scheme
            for name, scheme in schemes.items()
        }
    return out


_SCHEME_TYPES: Final[Mapping[str, str]] = {
    "httpAuthSecurityScheme": "http",
    "apiKeySecurityScheme": "apiKey",
    "oauth2SecurityScheme": "oauth2",
    "openIdConnectSecurityScheme": "openIdConnect",
    "mtlsSecurityScheme": "mutualTLS",
}
"""The 1.0 ``SecurityScheme`` oneof member, by the 0.3 ``type`` it is."""


def _scheme_with_v03(scheme: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(scheme)
    for member, kind in _SCHEME_TYPES.items():
        inner = scheme.get(member)
        if isinstance(inner, dict):
            extra = {k: v for k, v in inner.items() if k != "location"}
            if "location" in inner:
                extra["in"] = inner["location"]
            out.update({"type": kind, **extra})
            break
    return out


def _compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()
