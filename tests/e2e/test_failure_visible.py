"""End to end: a Task the plane gives up on ends FAILED with the reason, over HTTP.

Design rule "Failure is visible": the scripted agent's ``fail`` (every turn raises)
and ``output:`` without a workflow manifest (the tool refuses, the turn fails) are
retried (10 and 20 ms apart, then after 1 s and 2 s) and, at the delivery cap, the
Task moves to FAILED with an agent status message; the blocking send that started
it settles then with that Task. The server runs with ``--agent-concurrency 4`` and a
turn deadline, so both Tasks fail side by side.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
import trio

from tests.e2e.taskplane_proc import RunningServer, Spawner

pytestmark = pytest.mark.slow

HTTP_TIMEOUT_S = 60.0


async def blocking_send(server: RunningServer, text: str) -> dict[str, Any]:
    body = {
        "message": {
            "messageId": f"visible-{uuid.uuid4()}",
            "role": "ROLE_USER",
            "parts": [{"text": text}],
        }
    }
    async with httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client:
        response = await client.post(
            server.url + "/message:send", json=body, headers=server.auth_headers()
        )
    assert response.status_code == 200, response.text
    task: dict[str, Any] = response.json()["task"]
    return task


async def test_failing_scripted_turns_end_failed_with_a_reason(spawn: Spawner) -> None:
    server = await trio.to_thread.run_sync(
        lambda: spawn.serve(
            env={"A2A_AGENT_CONCURRENCY": "4", "A2A_TURN_TIMEOUT_MS": "20000"},
            blocking_timeout_ms=50_000,
        )
    )
    results: dict[str, dict[str, Any]] = {}

    async def run(text: str) -> None:
        results[text] = await blocking_send(server, text)

    async with trio.open_nursery() as nursery:
        for text in ("fail", 'output: pull-request {"n": 1}'):
            nursery.start_soon(run, text)

    for text, reason in (
        ("fail", "the scripted agent was told to fail this turn"),
        ('output: pull-request {"n": 1}', "no workflow outputs are declared"),
    ):
        status = results[text]["status"]
        assert status["state"] == "TASK_STATE_FAILED", results[text]
        said = status["message"]["parts"][0]["text"]
        assert status["message"]["role"] == "ROLE_AGENT"
        assert said.startswith("The agent could not finish this task: its turn failed 5 times")
        assert reason in said
    logged = [e.get("event") for e in server.process.log_events()]
    assert logged.count("a2a_wake_abandoned") == 2
    assert logged.count("a2a_task_turn_paused") == 4
