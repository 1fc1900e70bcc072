"""End to end: a Task the plane gives up on ends FAILED with the reason, over HTTP.

Design rule "Failure is visible": the scripted agent's ``fail`` (every turn raises)
and ``output:`` without a workflow manifest (the tool refuses, the turn fails) are
retried (10 and 20 ms apart, then after 1 s and 2 s) and, at the delivery cap, the
Task moves to FAILED with an agent status message; the blocking send that started
it settles then with that Task. The server runs with ``--agent-concurrency 4`` and a
turn deadline, so both Tasks fail side by side.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from tests.e2e._support import logged as logged_events
from tests.e2e._support import send_text
from tests.e2e.taskplane_proc import Spawner

pytestmark = pytest.mark.slow

HTTP_TIMEOUT_S = 60.0


async def test_failing_scripted_turns_end_failed_with_a_reason(spawn: Spawner) -> None:
    server = await trio.to_thread.run_sync(
        lambda: spawn.serve(
            env={"A2A_AGENT_CONCURRENCY": "4", "A2A_TURN_TIMEOUT_MS": "20000"},
            blocking_timeout_ms=50_000,
        )
    )
    results: dict[str, dict[str, Any]] = {}

    async def run(text: str) -> None:
        results[text] = await send_text(server, text, timeout_s=HTTP_TIMEOUT_S)

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
    logged = logged_events(server.process, "a2a_wake_abandoned", at_least=2)
    assert logged.count("a2a_wake_abandoned") == 2
    assert logged.count("a2a_task_turn_paused") == 4
