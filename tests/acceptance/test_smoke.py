"""Smoke test of the fixtures: one send, in-process and over a socket."""

from __future__ import annotations

import httpx

from tests.support.plane import send_body


async def test_send_completes_in_process(client: httpx.AsyncClient) -> None:
    response = await client.post("/message:send", json=send_body("hello", "m-1"))
    assert response.status_code == 200, response.text
    task = response.json()["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"] == [{"text": "hello"}]


async def test_stream_over_socket(live: httpx.AsyncClient) -> None:
    frames = []
    async with live.stream("POST", "/message:stream", json=send_body("hi", "m-2")) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                frames.append(line)
    assert '"task"' in frames[0]
    assert "TASK_STATE_COMPLETED" in frames[-1]
