"""Hostile or odd input found while trying to break the server: each gets a clear
§11.6 error and changes nothing."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.support.plane import ALPHA_TOKEN, BETA_TOKEN, send_body


async def _total(client: httpx.AsyncClient) -> int:
    return int((await client.get("/tasks")).json()["totalSize"])


@pytest.mark.parametrize("tenant", ["a%00b", "x" * 200, "-dash", "a%20b"])
async def test_a_segment_that_is_not_a_tenant_name_is_no_route(
    client: httpx.AsyncClient, tenant: str
) -> None:
    response = await client.post(f"/{tenant}/message:send", json=send_body("hi", "m-1"))
    assert response.status_code == 404
    assert response.json()["error"]["status"] == "NOT_FOUND"
    assert await _total(client) == 0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("messageId", "m" * 257),
        ("messageId", "m\x00x"),
        ("taskId", "t\nx"),
        ("contextId", "c" * 300),
    ],
)
async def test_overlong_or_control_character_ids_are_refused_and_record_nothing(
    client: httpx.AsyncClient, field: str, value: str
) -> None:
    body = send_body("hello", "m-1")
    body["message"][field] = value
    response = await client.post("/message:send", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["details"][0]["reason"] == "INVALID_ARGUMENT"
    assert await _total(client) == 0


async def test_two_authorization_headers_are_refused(client: httpx.AsyncClient) -> None:
    headers = [
        ("Authorization", f"Bearer {ALPHA_TOKEN}"),
        ("Authorization", f"Bearer {BETA_TOKEN}"),
        ("A2A-Version", "1.0"),
    ]
    response = await client.post(
        "/message:send", json=send_body("hello", "m-1"), headers=httpx.Headers(headers)
    )
    assert response.status_code == 401
    assert await _total(client) == 0


async def test_subscribe_and_cancel_decode_their_bodies_alike(client: httpx.AsyncClient) -> None:
    created = await client.post(
        "/message:send",
        json=send_body("ask: q", "m-1"),
    )
    task_id = created.json()["task"]["id"]
    for action in ("subscribe", "cancel"):
        response = await client.post(f"/tasks/{task_id}:{action}", json=[{"bogus": 1}])
        assert response.status_code == 400, action
        assert "object" in response.json()["error"]["message"]
    still = await client.get(f"/tasks/{task_id}")
    assert still.json()["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    # Issue 17, A2A §5.7: an unknown field (this test's former 400) is ignored by both.
    canceled = await client.post(f"/tasks/{task_id}:cancel", json={"bogus": 1})
    assert canceled.json()["status"]["state"] == "TASK_STATE_CANCELED", canceled.text
    terminal = await client.post(f"/tasks/{task_id}:subscribe", json={"bogus": 1})
    assert terminal.json()["error"]["details"][0]["reason"] == "UNSUPPORTED_OPERATION"
    metrics = (await client.get("/metrics")).text
    for request in ("CancelTaskRequest", "SubscribeToTaskRequest"):
        assert f'taskplane_unknown_fields_total{{request="{request}"}} 1.0' in metrics


async def _three_tasks_in_one_context(client: httpx.AsyncClient) -> str:
    context_id = None
    for n in range(3):
        extra = {"contextId": context_id} if context_id else {}
        message = send_body("hi", f"tok-{n}", **extra)
        message["configuration"] = {"returnImmediately": True}
        response = await client.post("/message:send", json=message)
        assert response.status_code == 200, response.text
        context_id = response.json()["task"]["contextId"]
    assert context_id is not None
    return context_id


async def _first_page_token(client: httpx.AsyncClient, **params: str) -> str:
    page = (await client.get("/tasks", params={"pageSize": "1", **params})).json()
    token: str = page["nextPageToken"]
    assert token
    return token


def _b64(raw: bytes) -> str:
    import base64

    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize(
    "token",
    [
        _b64(b'["not-a-time","x"]'),
        _b64(b'["2026-01-01T00:00:00.000Z","x"]'),
        _b64(b'["not-a-time","x"]') + "." + _b64(b"0" * 16),
        "",
    ],
)
async def test_a_page_token_this_server_did_not_issue_is_400(
    client: httpx.AsyncClient, token: str
) -> None:
    if not token:  # a real token with one character of its tag changed
        await _three_tasks_in_one_context(client)
        real = await _first_page_token(client)
        body, _, tag = real.partition(".")
        token = f"{body}.{'B' if tag[0] == 'A' else 'A'}{tag[1:]}"
    response = await client.get("/tasks", params={"pageToken": token})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["status"] == "INVALID_ARGUMENT"


async def test_a_page_token_is_refused_for_another_query(client: httpx.AsyncClient) -> None:
    context_id = await _three_tasks_in_one_context(client)
    token = await _first_page_token(client, contextId=context_id)
    ok = await client.get(
        "/tasks", params={"pageSize": "1", "contextId": context_id, "pageToken": token}
    )
    assert ok.status_code == 200, ok.text
    for other in (
        {},
        {"contextId": "other"},
        {"contextId": context_id, "status": "TASK_STATE_WORKING"},
    ):
        response = await client.get("/tasks", params={"pageToken": token, **other})
        assert response.status_code == 400, (other, response.text)


async def test_a_page_token_is_refused_for_another_principal(
    client: httpx.AsyncClient, beta: httpx.AsyncClient
) -> None:
    await _three_tasks_in_one_context(client)
    token = await _first_page_token(client)
    response = await beta.get("/tasks", params={"pageToken": token})
    assert response.status_code == 400, response.text


async def test_head_subscribe_answers_stream_headers_without_subscribing(
    client: httpx.AsyncClient,
) -> None:
    asked = (await client.post("/message:send", json=send_body("ask: q?", "head-1"))).json()
    task_id = asked["task"]["id"]
    response = await client.head(f"/tasks/{task_id}:subscribe")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.content == b""
    done = (await client.post("/message:send", json=send_body("hi", "head-2"))).json()
    terminal = await client.head(f"/tasks/{done['task']['id']}:subscribe")
    assert terminal.status_code == 400


def _message_of_size(size: int, message_id: str) -> dict[str, Any]:
    """A ``message`` object whose compact UTF-8 JSON is exactly ``size`` bytes."""
    message = send_body("", message_id)["message"]
    overhead = len(json.dumps(message, separators=(",", ":")).encode())
    message["parts"][0]["text"] = "x" * (size - overhead)
    return message


async def test_a_message_over_256_kib_is_413_and_records_nothing(
    client: httpx.AsyncClient,
) -> None:
    limit = 256 * 1024
    over = await client.post(
        "/message:send", json={"message": _message_of_size(limit + 1, "big-1")}
    )
    assert over.status_code == 413, over.text
    error = over.json()["error"]
    assert error["details"][0]["metadata"]["limitBytes"] == str(limit)
    assert await _total(client) == 0
    at = await client.post("/message:send", json={"message": _message_of_size(limit, "big-2")})
    assert at.status_code == 200, at.text


async def test_a_chunked_body_over_the_limit_is_413_with_its_limit(
    client: httpx.AsyncClient,
) -> None:
    async def chunks() -> Any:
        for _ in range(64):
            yield b" " * 32_768  # 2 MiB in all, no Content-Length: chunked

    response = await client.post(
        "/message:send", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 413, response.text
    error = response.json()["error"]
    assert error["details"][0]["metadata"]["limitBytes"] == "1048576"
    assert await _total(client) == 0
