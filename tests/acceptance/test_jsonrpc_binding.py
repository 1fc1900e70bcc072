"""The JSON-RPC 2.0 binding at ``POST /``: the same operations over the same plane as the
HTTP+JSON routes, JSON-RPC framing and error objects (A2A v1.0.1 §9).

In process (httpx's ASGI transport buffers whole responses, so only streams that end
are read here; the real clients in ``tests/e2e`` read live streams).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest

from taskplane.extensions import ELICITATION_URI
from tests.acceptance._support import (
    BAD_REQUEST_TYPE,
    CANCELED,
    COMPLETED,
    ERROR_INFO_TYPE,
    INPUT_REQUIRED,
    states_of,
)
from tests.support.plane import send_body


async def rpc(
    client: httpx.AsyncClient,
    method: str,
    params: Any = None,
    *,
    rpc_id: Any = 1,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    envelope: dict[str, Any] = {"jsonrpc": "2.0", "id": rpc_id, "method": method}
    if params is not None:
        envelope["params"] = params
    return await client.post("/", json=envelope, headers=headers)


async def result(client: httpx.AsyncClient, method: str, params: Any = None) -> Any:
    response = await rpc(client, method, params)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["jsonrpc"] == "2.0" and body["id"] == 1 and "error" not in body, body
    return body["result"]


def rpc_error(response: httpx.Response, code: int, reason: str, status: int = 200) -> Any:
    """The JSON-RPC error of ``response``, checked: its code, HTTP status and reason."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert body["jsonrpc"] == "2.0" and "result" not in body, body
    error = body["error"]
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"]
    info = error["data"][0]
    assert info["@type"] == ERROR_INFO_TYPE and info["reason"] == reason, error
    return body


def frames_of(response: httpx.Response, rpc_id: Any = 1) -> list[dict[str, Any]]:
    """The JSON-RPC responses of an ended SSE stream, each checked for its id."""
    assert response.headers["content-type"].startswith("text/event-stream")
    frames = [
        json.loads(line[len("data:") :])
        for line in response.text.splitlines()
        if line.startswith("data:")
    ]
    assert all(f["jsonrpc"] == "2.0" and f["id"] == rpc_id for f in frames), frames
    return frames


async def test_send_message_blocks_until_completed(client: httpx.AsyncClient) -> None:
    answer = await result(client, "SendMessage", send_body("hello rpc", "rpc-send-1"))
    task = answer["task"]
    assert task["status"]["state"] == COMPLETED
    assert task["history"][0]["messageId"] == "rpc-send-1"
    # The same Task over HTTP+JSON: one plane behind both bindings.
    same = await client.get(f"/tasks/{task['id']}")
    assert same.json() == await result(client, "GetTask", {"id": task["id"]})


async def test_send_message_return_immediately_and_direct_reply(
    client: httpx.AsyncClient,
) -> None:
    body = send_body("sleep: 10000", "rpc-send-2", configuration={"returnImmediately": True})
    task = (await result(client, "SendMessage", body))["task"]
    assert task["status"]["state"] in {"TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"}
    canceled = await result(client, "CancelTask", {"id": task["id"]})
    assert canceled["status"]["state"] == CANCELED
    again = await rpc(client, "CancelTask", {"id": task["id"]})
    rpc_error(again, -32002, "TASK_NOT_CANCELABLE")
    pong = await result(client, "SendMessage", send_body("ping", "rpc-ping"))
    assert pong["message"]["role"] == "ROLE_AGENT"


async def test_duplicate_replays_and_a_changed_payload_is_a_conflict(
    client: httpx.AsyncClient,
) -> None:
    first = await result(client, "SendMessage", send_body("once", "rpc-dup"))
    assert await result(client, "SendMessage", send_body("once", "rpc-dup")) == first
    conflict = await rpc(client, "SendMessage", send_body("changed", "rpc-dup"))
    rpc_error(conflict, -32000, "DUPLICATE_MESSAGE_ID")
    metrics = (await client.get("/metrics")).text
    assert "taskplane_http_conflicts_total 1.0" in metrics


async def test_input_required_then_the_answer_by_task_id(client: httpx.AsyncClient) -> None:
    asked = (await result(client, "SendMessage", send_body("ask: which?", "rpc-ask")))["task"]
    assert asked["status"]["state"] == INPUT_REQUIRED
    reply = send_body("blue", "rpc-answer", taskId=asked["id"])
    answered = (await result(client, "SendMessage", reply))["task"]
    assert answered["id"] == asked["id"]
    assert answered["status"]["state"] == COMPLETED
    trimmed = await result(client, "GetTask", {"id": asked["id"], "historyLength": 1})
    assert [m["messageId"] for m in trimmed["history"]] == ["rpc-answer"]


async def test_list_tasks_is_scoped_to_the_principal_and_tenant(
    client: httpx.AsyncClient, beta: httpx.AsyncClient
) -> None:
    mine = (await result(client, "SendMessage", send_body("mine", "rpc-list-1")))["task"]
    tenanted = {**send_body("tenant a", "rpc-list-2"), "tenant": "acme"}
    other = (await result(client, "SendMessage", tenanted))["task"]
    listed = await result(client, "ListTasks", {"contextId": mine["contextId"], "pageSize": 10})
    assert [t["id"] for t in listed["tasks"]] == [mine["id"]]
    in_tenant = await result(client, "ListTasks", {"tenant": "acme"})
    assert [t["id"] for t in in_tenant["tasks"]] == [other["id"]]
    # The tenant of a JSON-RPC call is the tenant of the HTTP+JSON path.
    assert (await client.get(f"/acme/tasks/{other['id']}")).status_code == 200
    rpc_error(await rpc(client, "GetTask", {"id": other["id"]}), -32001, "TASK_NOT_FOUND")
    rpc_error(await rpc(beta, "GetTask", {"id": mine["id"]}), -32001, "TASK_NOT_FOUND")
    assert (await result(beta, "ListTasks", {}))["tasks"] == []
    bad = await rpc(client, "ListTasks", {"pageSize": 0})
    violations = rpc_error(bad, -32602, "INVALID_ARGUMENT")["error"]["data"][1]
    assert violations["@type"] == BAD_REQUEST_TYPE
    assert [v["field"] for v in violations["fieldViolations"]] == ["pageSize"]


async def test_streaming_frames_are_json_rpc_responses(client: httpx.AsyncClient) -> None:
    response = await rpc(
        client, "SendStreamingMessage", send_body("hello stream", "rpc-stream"), rpc_id="s-1"
    )
    assert response.status_code == 200
    frames = frames_of(response, "s-1")
    results = [f["result"] for f in frames]
    assert "task" in results[0]
    assert states_of(results)[-1] == COMPLETED
    task_id = results[0]["task"]["id"]
    # A terminal Task cannot be subscribed to: an error object, no stream.
    refused = await rpc(client, "SubscribeToTask", {"id": task_id})
    rpc_error(refused, -32004, "UNSUPPORTED_OPERATION")


async def test_push_config_and_extended_card_methods_answer_their_errors(
    client: httpx.AsyncClient,
) -> None:
    for method in (
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
    ):
        response = await rpc(client, method, {"taskId": "t-1", "id": "c-1"})
        rpc_error(response, -32003, "PUSH_NOTIFICATION_NOT_SUPPORTED")
    extended = await rpc(client, "GetExtendedAgentCard", {})
    rpc_error(extended, -32004, "UNSUPPORTED_OPERATION")


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b"{not json", -32700),
        (b"", -32700),
        (b"[]", -32600),
        (b'[{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}]', -32600),
        (b'"SendMessage"', -32600),
        (b'{"jsonrpc":"1.0","id":1,"method":"GetTask"}', -32600),
        (b'{"jsonrpc":"2.0","method":"SendMessage","params":{}}', -32600),
        (b'{"jsonrpc":"2.0","id":true,"method":"GetTask"}', -32600),
        (b'{"jsonrpc":"2.0","id":1,"method":7}', -32600),
        (b'{"jsonrpc":"2.0","id":1,"method":"message/send"}', -32601),
        (b'{"jsonrpc":"2.0","id":1,"method":"GetTask","params":[1]}', -32602),
        (b'{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{}}', -32602),
        (b'{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":3}}', -32602),
    ],
)
async def test_malformed_envelopes_get_json_rpc_errors(
    client: httpx.AsyncClient, raw: bytes, code: int
) -> None:
    response = await client.post("/", content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["error"]["code"] == code, body
    # The id is echoed once it can be read (an object with a string or integer id).
    assert body["id"] == (1 if b'"id":1' in raw and not raw.startswith(b"[") else None)


async def test_transport_errors_keep_their_http_status(client: httpx.AsyncClient) -> None:
    envelope = {"jsonrpc": "2.0", "id": "a", "method": "ListTasks", "params": {}}
    anonymous = await client.post("/", json=envelope, headers={"Authorization": ""})
    body = rpc_error(anonymous, -32000, "UNAUTHENTICATED", status=401)
    assert body["id"] is None  # refused before the envelope was read
    assert anonymous.headers["www-authenticate"].startswith("Bearer")
    typed = await client.post("/", content=b"{}", headers={"Content-Type": "text/plain"})
    rpc_error(typed, -32005, "UNSUPPORTED_MEDIA_TYPE", status=415)
    version = await rpc(client, "ListTasks", {}, headers={"A2A-Version": "0.3"})
    rpc_error(version, -32009, "VERSION_NOT_SUPPORTED")
    wrong_method = await client.get("/")
    assert wrong_method.status_code == 405 and wrong_method.headers["allow"] == "POST"


async def test_extensions_are_negotiated_as_on_http_json(client: httpx.AsyncClient) -> None:
    response = await rpc(
        client,
        "SendMessage",
        send_body("hello ext", "rpc-ext"),
        headers={"A2A-Extensions": f"{ELICITATION_URI}, urn:unknown"},
    )
    assert response.status_code == 200
    assert response.headers["a2a-extensions"] == ELICITATION_URI


async def test_unknown_params_are_ignored_and_wrong_types_refused(
    client: httpx.AsyncClient,
) -> None:
    body = send_body("tolerant", "rpc-tolerant", newerField={"x": 1})
    body["configuration"] = {"returnImmediately": False, "futureOption": [1]}
    task = (await result(client, "SendMessage", {**body, "alsoNew": True}))["task"]
    assert task["status"]["state"] == COMPLETED
    listed = await result(client, "ListTasks", {"contextId": task["contextId"], "newer": {"a": 1}})
    assert [t["id"] for t in listed["tasks"]] == [task["id"]]
    got = await result(client, "GetTask", {"id": task["id"], "history_length": 0, "zz": [1]})
    assert "history" not in got  # the proto field name stands for historyLength
    wrong = await rpc(client, "ListTasks", {"pageSize": {"n": 1}})
    rpc_error(wrong, -32602, "INVALID_ARGUMENT")
    enum = await rpc(client, "ListTasks", {"status": "TASK_STATE_NOPE"})
    rpc_error(enum, -32602, "INVALID_ARGUMENT")
    metrics = (await client.get("/metrics")).text
    assert 'taskplane_unknown_fields_total{request="SendMessageRequest"} 3.0' in metrics
    assert 'taskplane_unknown_fields_total{request="ListTasksRequest"} 1.0' in metrics
    assert 'taskplane_unknown_fields_total{request="GetTaskRequest"} 1.0' in metrics


@pytest.mark.parametrize("depth", [1_000, 100_000])
async def test_json_nested_too_deeply_is_the_http_json_bound(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture, depth: int
) -> None:
    # One bound for both bindings: what /message:send refuses 400 "nested too deeply"
    # is an invalid request here (-32600), not an internal error, and logs no traceback.
    nested = "[" * depth + "]" * depth
    raw = '{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{"x":' + nested + "}}"
    message = f'{{"role":"ROLE_USER","messageId":"deep","parts":[{{"text":{nested}}}]}}'
    plain = await client.post(
        "/message:send",
        content=f'{{"message":{message}}}',
        headers={"Content-Type": "application/json"},
    )
    assert plain.status_code == 400 and "nested too deeply" in plain.text, plain.text
    response = await client.post("/", content=raw, headers={"Content-Type": "application/json"})
    body = rpc_error(response, -32600, "INVALID_ARGUMENT")
    assert "nested too deeply" in body["error"]["message"]
    assert body["id"] is None  # the body could not be read, so neither could its id
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


@pytest.mark.parametrize("tenant", ["tasks", "message:send", "message:stream", ".well-known"])
async def test_a_tenant_the_path_grammar_reserves_is_refused(
    client: httpx.AsyncClient, tenant: str
) -> None:
    # A Task created under such a tenant could never be read at /{tenant}/tasks/{id}.
    sent = await rpc(client, "SendMessage", {**send_body("reserved", "rpc-rsv"), "tenant": tenant})
    body = rpc_error(sent, -32602, "INVALID_ARGUMENT")
    assert body["error"]["data"][1]["fieldViolations"][0]["field"] == "tenant"
    listed = await rpc(client, "ListTasks", {"tenant": tenant})
    rpc_error(listed, -32602, "INVALID_ARGUMENT")


async def test_errors_found_before_the_body_is_read_carry_a_null_id(
    client: httpx.AsyncClient,
) -> None:
    # As docs/http-api.md says: the id is echoed only once the body is read.
    headers = {"A2A-Version": "9.9"}
    version = await rpc(client, "ListTasks", {}, rpc_id="v", headers=headers)
    assert rpc_error(version, -32009, "VERSION_NOT_SUPPORTED")["id"] is None
    typed = await client.post(
        "/",
        content=b'{"jsonrpc":"2.0","id":"t","method":"ListTasks"}',
        headers={"Content-Type": "text/plain"},
    )
    assert rpc_error(typed, -32005, "UNSUPPORTED_MEDIA_TYPE", status=415)["id"] is None
    listed = await rpc(client, "ListTasks", {}, rpc_id="ok")
    assert listed.json()["id"] == "ok"
