"""Hostile or odd input found while trying to break the server: each gets a clear
§11.6 error and changes nothing."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import ALPHA_TOKEN, BETA_TOKEN, send_body


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
        response = await client.post(f"/tasks/{task_id}:{action}", json={"bogus": 1})
        assert response.status_code == 400, action
        assert "bogus" in response.json()["error"]["message"]
    still = await client.get(f"/tasks/{task_id}")
    assert still.json()["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
