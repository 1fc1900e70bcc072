"""A2A 0.3 HTTP+JSON compatibility (``TASKPLANE_A2A_COMPAT=0.3``): the 0.3 REST
binding's payloads, translated at the edge to the 1.0 ones, both ways.

The 0.3 HTTP+JSON binding serves the operations at ``/v1/...`` (``/v1/message:send``,
``/v1/message:stream``, ``/v1/tasks/{id}`` with ``historyLength``,
``/v1/tasks/{id}:cancel``, ``GET /v1/tasks/{id}:subscribe``,
``/v1/tasks/{id}/pushNotificationConfigs[/{configId}]``); its payloads are the JSON of
the 0.3 protobuf (``a2a.v1`` of 0.3), which differs from both the 0.3 JSON-RPC shapes
and the 1.0 ones. Its readers reject unknown fields, so each answer here holds only the
0.3 protobuf's fields. Each translation goes through the 0.3 JSON-RPC shapes of
:mod:`taskplane.http.compat03`, so the rules live there once (states, roles, ``final``,
``blocking``, a non-object data part wrapped as ``{"value": ...}``):

* 0.3 protobuf → 0.3 JSON-RPC (this module) → 1.0 (:mod:`~taskplane.http.compat03`);
* 1.0 → 0.3 JSON-RPC (:mod:`~taskplane.http.compat03`) → 0.3 protobuf (this module).

Shapes (0.3 protobuf ← → 0.3 JSON-RPC):

* Message: ``content`` ↔ ``parts``, ``role: "ROLE_USER"`` ↔ ``"user"``, no ``kind``;
* parts: ``{"text"}`` ↔ ``{"kind": "text", "text"}``; ``{"file": {"fileWithUri" |
  "fileWithBytes", "mimeType", "name"}}`` ↔ ``{"kind": "file", "file": {"uri" |
  "bytes", ...}}``; ``{"data": {"data": {...}}}`` ↔ ``{"kind": "data", "data": {...}}``;
* ``TaskState``: ``TASK_STATE_CANCELLED`` ↔ ``canceled``, ``TASK_STATE_INPUT_REQUIRED``
  ↔ ``input-required`` ...;
* ``configuration.pushNotification`` ↔ ``configuration.pushNotificationConfig``; a
  configuration without ``blocking`` is non-blocking (the protobuf's ``false`` is not
  written), while a request without a configuration blocks, as everywhere;
* ``SendMessageResponse``/``StreamResponse``: ``{"task"}``, ``{"message"}``,
  ``{"statusUpdate"}``, ``{"artifactUpdate"}`` (each 0.3 object without ``kind``);
* ``TaskPushNotificationConfig``: ``{"name": "tasks/{id}/pushNotificationConfigs/{configId}",
  "pushNotificationConfig"}``; a list is ``{"configs": [...]}``.

Pure: no I/O, no trio, no Quart.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any, Final

from taskplane.errors import InvalidRequest
from taskplane.http import compat03

TENANT: Final = "v1"
"""The first path segment of the 0.3 HTTP+JSON binding (``/v1/...``), which the 1.0
routing reads as a tenant."""

_STATES: Final[Mapping[str, str]] = {
    "submitted": "TASK_STATE_SUBMITTED",
    "working": "TASK_STATE_WORKING",
    "input-required": "TASK_STATE_INPUT_REQUIRED",
    "completed": "TASK_STATE_COMPLETED",
    "canceled": "TASK_STATE_CANCELLED",
    "failed": "TASK_STATE_FAILED",
    "rejected": "TASK_STATE_REJECTED",
    "auth-required": "TASK_STATE_AUTH_REQUIRED",
    "unknown": "TASK_STATE_UNSPECIFIED",
}
_ROLES: Final[Mapping[str, str]] = {
    "ROLE_USER": "user",
    "ROLE_AGENT": "agent",
    "user": "ROLE_USER",
    "agent": "ROLE_AGENT",
}
_MESSAGE_FIELDS: Final = ("messageId", "contextId", "taskId", "metadata", "extensions")
_ARTIFACT_FIELDS: Final = ("artifactId", "name", "description", "metadata", "extensions")


# --- 0.3 protobuf -> 1.0 (requests) -----------------------------------------------------


def send_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """A 0.3 ``SendMessageRequest`` (``{"message", "configuration", "metadata"}``) as
    the 1.0 send body.

    Raises:
        InvalidRequest: no message object, an unknown role, a part of no known kind.
    """
    message = body.get("message")
    if not isinstance(message, dict):
        raise InvalidRequest("a 0.3 SendMessageRequest needs a message object")
    params: dict[str, Any] = {"message": _message_to_rpc(message)}
    configuration = body.get("configuration")
    if isinstance(configuration, dict):
        rpc_configuration = {k: v for k, v in configuration.items() if k != "pushNotification"}
        rpc_configuration["blocking"] = configuration.get("blocking") is True  # proto3 default
        if isinstance(configuration.get("pushNotification"), dict):
            rpc_configuration["pushNotificationConfig"] = configuration["pushNotification"]
        params["configuration"] = rpc_configuration
    if "metadata" in body:
        params["metadata"] = body["metadata"]
    return compat03.request_params("SendMessage", params)


def push_config_body(task_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """A 0.3 ``CreateTaskPushNotificationConfigRequest`` (``{"parent", "configId",
    "config": {"name", "pushNotificationConfig"}}``) as the 1.0 create body."""
    config = body.get("config")
    inner = config.get("pushNotificationConfig") if isinstance(config, dict) else None
    params: dict[str, Any] = {"taskId": task_id}
    if isinstance(inner, dict):
        params["pushNotificationConfig"] = inner
    return compat03.request_params("CreateTaskPushNotificationConfig", params)


def _message_to_rpc(message: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {k: v for k, v in message.items() if k != "content"}
    out["kind"] = "message"
    role = message.get("role")
    if isinstance(role, str):
        out["role"] = _ROLES.get(role, role)
    content = message.get("content")
    out["parts"] = [_part_to_rpc(part) for part in content] if isinstance(content, list) else []
    return out


def _part_to_rpc(part: Any) -> Any:
    if not isinstance(part, dict):
        raise InvalidRequest("a 0.3 part is an object")
    common = {k: part[k] for k in ("metadata",) if k in part}
    if "text" in part:
        return {"kind": "text", "text": part["text"], **common}
    file = part.get("file")
    if isinstance(file, dict):
        out: dict[str, Any] = {}
        if "fileWithBytes" in file:
            out["bytes"] = file["fileWithBytes"]
        if "fileWithUri" in file:
            out["uri"] = file["fileWithUri"]
        out.update({k: file[k] for k in ("mimeType", "name") if k in file})
        return {"kind": "file", "file": out, **common}
    data = part.get("data")
    if isinstance(data, dict):
        return {"kind": "data", "data": data.get("data", {}), **common}
    raise InvalidRequest("a 0.3 part needs one of text, file or data")


# --- 1.0 -> 0.3 protobuf (answers) ------------------------------------------------------


def result(operation: str, body: Mapping[str, Any]) -> Any:
    """The 0.3 answer of the 1.0 ``body`` answered to ``operation`` (``send``, ``get``,
    ``cancel``, ``push``)."""
    if operation == "send":
        return response(body)
    if operation in ("get", "cancel"):
        return _task(compat03.task_to_v03(body))
    if operation == "push":
        if isinstance(body.get("configs"), list):
            listed = compat03.result("ListTaskPushNotificationConfigs", body)
            return {"configs": [_push_config(config) for config in listed]}
        if not body:
            return {}
        return _push_config(compat03.result("GetTaskPushNotificationConfig", body))
    return dict(body)


def response(body: Mapping[str, Any]) -> dict[str, Any]:
    """A 1.0 ``SendMessageResponse`` or ``StreamResponse`` as the 0.3 one (its one
    member, ``task``, ``message``, ``statusUpdate`` or ``artifactUpdate``, in 0.3)."""
    event = compat03.stream_event(body)
    kind = event.get("kind") if isinstance(event, dict) else None
    if kind == "task":
        return {"task": _task(event)}
    if kind == "message":
        return {"message": _message(event)}
    if kind == "status-update":
        update = {k: event[k] for k in ("taskId", "contextId", "final", "metadata") if k in event}
        return {"statusUpdate": {**update, "status": _status(event.get("status") or {})}}
    if kind == "artifact-update":
        keys = ("taskId", "contextId", "append", "lastChunk", "metadata")
        update = {k: event[k] for k in keys if k in event}
        return {"artifactUpdate": {**update, "artifact": _artifact(event.get("artifact") or {})}}
    return dict(body)


async def frames(v1_frames: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The SSE bytes of a 0.3 stream: each ``data:`` frame of ``v1_frames`` (a 1.0
    ``StreamResponse``) as the 0.3 one; other frames (errors, comments) as they are."""
    async for chunk in v1_frames:
        parts: list[bytes] = []
        for event in chunk.split(b"\n\n"):
            if event.startswith(b"data: "):
                value = json.loads(event[len(b"data: ") :])
                if isinstance(value, dict) and "error" not in value:
                    value = response(value)
                parts.append(b"data: " + _compact(value) + b"\n\n")
            elif event:
                parts.append(event + b"\n\n")
        yield b"".join(parts)


def _task(task: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {k: task[k] for k in ("id", "contextId", "metadata") if k in task}
    out["status"] = _status(task.get("status") or {})
    if isinstance(task.get("artifacts"), list):
        out["artifacts"] = [_artifact(artifact) for artifact in task["artifacts"]]
    if isinstance(task.get("history"), list):
        out["history"] = [_message(message) for message in task["history"]]
    return out


def _status(status: Mapping[str, Any]) -> dict[str, Any]:
    state = status.get("state")
    out: dict[str, Any] = {
        "state": _STATES.get(state if isinstance(state, str) else "", "TASK_STATE_UNSPECIFIED")
    }
    if isinstance(status.get("message"), dict):
        out["message"] = _message(status["message"])
    if "timestamp" in status:
        out["timestamp"] = status["timestamp"]
    return out


def _message(message: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {k: message[k] for k in _MESSAGE_FIELDS if k in message}
    role = message.get("role")
    out["role"] = _ROLES.get(role if isinstance(role, str) else "", "ROLE_UNSPECIFIED")
    out["content"] = [_part(part) for part in message.get("parts") or []]
    return out


def _artifact(artifact: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {k: artifact[k] for k in _ARTIFACT_FIELDS if k in artifact}
    out["parts"] = [_part(part) for part in artifact.get("parts") or []]
    return out


def _part(part: Mapping[str, Any]) -> dict[str, Any]:
    common = {k: part[k] for k in ("metadata",) if k in part}
    kind = part.get("kind")
    if kind == "text":
        return {"text": part.get("text", ""), **common}
    if kind == "file":
        file = part.get("file") or {}
        out: dict[str, Any] = {}
        if "bytes" in file:
            out["fileWithBytes"] = file["bytes"]
        if "uri" in file:
            out["fileWithUri"] = file["uri"]
        out.update({k: file[k] for k in ("mimeType", "name") if k in file})
        return {"file": out, **common}
    return {"data": {"data": part.get("data", {})}, **common}


def _push_config(config: Mapping[str, Any]) -> dict[str, Any]:
    inner = dict(config.get("pushNotificationConfig") or {})
    name = f"tasks/{config.get('taskId', '')}/pushNotificationConfigs/{inner.get('id', '')}"
    return {"name": name, "pushNotificationConfig": inner}


def _compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()
