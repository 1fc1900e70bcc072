"""A2A 0.3 compatibility (``TASKPLANE_A2A_COMPAT=0.3``) on an in-process server: 0.3
JSON-RPC calls are answered in 0.3 shapes, 1.0 calls are unchanged, and without the
setting a 0.3 call keeps today's answers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.acceptance._support import Server, serve
from tests.support.plane import send_body


def rpc(method: str, params: dict[str, Any], identifier: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": identifier, "method": method, "params": params}


def message03(text: str, message_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "kind": "message",
        "messageId": message_id,
        "role": "user",
        "parts": [{"kind": "text", "text": text}],
        **fields,
    }


async def post03(client: httpx.AsyncClient, call: dict[str, Any]) -> httpx.Response:
    """``POST /`` as a 0.3 client sends it: no ``A2A-Version``."""
    request = client.build_request("POST", "/", json=call)
    del request.headers["A2A-Version"]
    return await client.send(request)


@pytest.fixture
async def compat(tmp_path: Path) -> AsyncIterator[Server]:
    async with serve(tmp_path / "store", compat03=True) as server:
        yield server


async def test_the_card_has_both_versions_fields(compat: Server) -> None:
    card = (await compat.client.get("/.well-known/agent-card.json")).json()
    assert card["protocolVersion"] == "0.3.0" and card["preferredTransport"] == "JSONRPC"
    assert card["supportedInterfaces"][0]["protocolVersion"] == "1.0"


async def test_a_03_send_get_and_follow_up_are_03_shapes(compat: Server) -> None:
    client = compat.client
    sent = await post03(client, rpc("message/send", {"message": message03("ask: which?", "c3-1")}))
    task = sent.json()["result"]
    assert task["kind"] == "task" and task["status"]["state"] == "input-required", task
    assert task["status"]["message"]["role"] == "agent"
    assert task["status"]["message"]["parts"] == [{"kind": "text", "text": "which?"}]
    answer = message03("left", "c3-2", taskId=task["id"], contextId=task["contextId"])
    done = (await post03(client, rpc("message/send", {"message": answer}))).json()["result"]
    assert done["id"] == task["id"] and done["status"]["state"] == "completed", done
    got = await post03(client, rpc("tasks/get", {"id": task["id"], "historyLength": 1}))
    assert [m["parts"] for m in got.json()["result"]["history"]] == [
        [{"kind": "text", "text": "left"}]
    ]
    missing = await post03(client, rpc("tasks/get", {"id": "no-such-task"}, 9))
    assert missing.status_code == 200
    assert missing.json()["id"] == 9 and missing.json()["error"]["code"] == -32001


async def test_a_03_stream_is_03_events_with_final(compat: Server) -> None:
    body = {"message": message03("sleep: 10", "c3-s")}
    request = compat.client.build_request("POST", "/", json=rpc("message/stream", body))
    request.headers["A2A-Version"] = "0.3"
    response = await compat.client.send(request, stream=True)
    try:
        raw = b"".join([chunk async for chunk in response.aiter_bytes()])
    finally:
        await response.aclose()
    events = [json.loads(e[6:]) for e in raw.split(b"\n\n") if e.startswith(b"data: ")]
    results = [e["result"] for e in events]
    assert results[0]["kind"] == "task"
    assert {r["kind"] for r in results[1:]} <= {"status-update", "artifact-update"}
    assert results[-1]["kind"] == "status-update" and results[-1]["final"] is True
    assert results[-1]["status"]["state"] == "completed"


async def test_with_compat_a_10_call_is_unchanged(compat: Server) -> None:
    client = compat.client
    body = send_body("hello", "c3-v1")
    plain = await client.post("/", json=rpc("SendMessage", body))
    assert plain.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    versioned = await client.post(
        "/",
        json=rpc("GetTask", {"id": plain.json()["result"]["task"]["id"]}),
        headers={"A2A-Version": "1.0"},
    )
    assert versioned.json()["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
    rest = await client.post("/message:send", json=send_body("hello", "c3-v1-rest"))
    assert rest.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    # A 0.3 method under an explicit 1.0 is not a 1.0 method.
    wrong = await client.post(
        "/",
        json=rpc("message/send", {"message": message03("x", "c3-x")}),
        headers={"A2A-Version": "1.0"},
    )
    assert wrong.json()["error"]["code"] == -32601


async def test_without_compat_a_03_call_keeps_todays_answers(tmp_path: Path) -> None:
    async with serve(tmp_path / "store") as server:
        card = (await server.client.get("/.well-known/agent-card.json")).json()
        assert "protocolVersion" not in card and "url" not in card
        call = rpc("message/send", {"message": message03("x", "off-1")})
        unversioned = await post03(server.client, call)
        assert unversioned.json()["error"]["code"] == -32601
        versioned = await server.client.post("/", json=call, headers={"A2A-Version": "0.3"})
        error = versioned.json()["error"]
        assert error["code"] == -32009
        assert error["data"][0]["reason"] == "VERSION_NOT_SUPPORTED"
        rest = await server.client.post(
            "/message:send", json=send_body("x", "off-2"), headers={"A2A-Version": "0.3"}
        )
        assert rest.status_code == 400
        assert rest.json()["error"]["details"][0]["reason"] == "VERSION_NOT_SUPPORTED"


def message03_rest(text: str, message_id: str) -> dict[str, Any]:
    """A message as the 0.3 HTTP+JSON binding sends it (the 0.3 protobuf's JSON)."""
    return {"messageId": message_id, "role": "ROLE_USER", "content": [{"text": text}]}


async def test_without_compat_v1_paths_are_tenant_v1s_routes(tmp_path: Path) -> None:
    """Without the setting, ``/v1/...`` (the 0.3 HTTP+JSON paths) is the 1.0 binding's
    tenant ``v1``, and a 0.3 body there is refused as a 1.0 one."""
    async with serve(tmp_path / "store") as server:
        client = server.client
        sent = await client.post("/v1/message:send", json=send_body("hello", "v1-1"))
        task = sent.json()["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", sent.text
        got = await client.get(f"/v1/tasks/{task['id']}", params={"historyLength": 1})
        assert got.status_code == 200 and got.json()["id"] == task["id"], got.text
        elsewhere = await client.get(f"/tasks/{task['id']}")
        assert elsewhere.status_code == 404  # the Task is tenant v1's
        card = await client.get("/v1/card")
        assert card.status_code == 404
        assert "no route for /v1/card" in card.json()["error"]["message"], card.text
        request = client.build_request(
            "POST", "/v1/message:send", json={"request": message03_rest("x", "v1-2")}
        )
        del request.headers["A2A-Version"]  # as the 0.3 client sends it
        refused = await client.send(request)
        assert refused.status_code == 400, refused.text


async def rest03(
    client: httpx.AsyncClient, method: str, path: str, **fields: Any
) -> httpx.Response:
    """A 0.3 HTTP+JSON request as the 0.3 client sends it: no ``A2A-Version``."""
    request = client.build_request(method, path, **fields)
    del request.headers["A2A-Version"]
    return await client.send(request)


async def test_the_card_lists_the_03_http_json_interface(compat: Server) -> None:
    card = (await compat.client.get("/.well-known/agent-card.json")).json()
    transports = [i["transport"] for i in card["additionalInterfaces"]]
    assert transports == ["JSONRPC", "HTTP+JSON"]
    assert {i["url"] for i in card["additionalInterfaces"]} == {card["url"]}


async def test_a_03_rest_send_get_and_cancel_are_03_shapes(compat: Server) -> None:
    client = compat.client
    sent = await rest03(
        client, "POST", "/v1/message:send", json={"message": message03_rest("ask: which?", "r3-1")}
    )
    task = sent.json()["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", sent.text
    assert task["status"]["message"]["role"] == "ROLE_AGENT"
    assert task["status"]["message"]["content"] == [{"text": "which?"}]
    assert "kind" not in task and "parts" not in task["history"][0]
    got = await rest03(client, "GET", f"/v1/tasks/{task['id']}", params={"historyLength": 1})
    assert [m["content"] for m in got.json()["history"]] == [[{"text": "which?"}]], got.text
    canceled = await rest03(
        client, "POST", f"/v1/tasks/{task['id']}:cancel", json={"name": f"tasks/{task['id']}"}
    )
    assert canceled.json()["status"]["state"] == "TASK_STATE_CANCELLED", canceled.text
    # The Task is the plain (tenant-less) one, as a 0.3 JSON-RPC call sees it.
    plain = await client.get(f"/tasks/{task['id']}")
    assert plain.json()["status"]["state"] == "TASK_STATE_CANCELED"
    missing = await rest03(client, "GET", "/v1/tasks/no-such-task")
    assert missing.status_code == 404
    refused = await rest03(
        client, "POST", "/v1/message:send", json={"message": {"messageId": "r3-x", "content": [{}]}}
    )
    assert refused.status_code == 400, refused.text


async def test_a_03_rest_stream_and_subscribe_are_03_stream_responses(compat: Server) -> None:
    body = {"message": message03_rest("sleep: 10", "r3-s")}
    request = compat.client.build_request("POST", "/v1/message:stream", json=body)
    request.headers["A2A-Version"] = "0.3"
    response = await compat.client.send(request, stream=True)
    try:
        raw = b"".join([chunk async for chunk in response.aiter_bytes()])
    finally:
        await response.aclose()
    events = [json.loads(e[6:]) for e in raw.split(b"\n\n") if e.startswith(b"data: ")]
    kinds = [next(iter(e)) for e in events]
    assert kinds[0] == "task" and set(kinds[1:]) == {"statusUpdate", "artifactUpdate"}, events
    assert events[-1]["statusUpdate"]["final"] is True
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    artifacts = [e["artifactUpdate"]["artifact"] for e in events if "artifactUpdate" in e]
    assert artifacts[-1]["parts"] == [{"text": "Slept 10 ms."}]
    task_id = events[0]["task"]["id"]
    done = await rest03(compat.client, "GET", f"/v1/tasks/{task_id}:subscribe")
    assert done.status_code == 400  # a terminal Task cannot be subscribed to (§3.1.6)


async def test_with_compat_v1_under_10_is_still_tenant_v1(compat: Server) -> None:
    sent = await compat.client.post("/v1/message:send", json=send_body("hello", "r3-v1"))
    task = sent.json()["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", sent.text
    assert (await compat.client.get(f"/tasks/{task['id']}")).status_code == 404
    assert (await compat.client.get(f"/v1/tasks/{task['id']}")).status_code == 200
