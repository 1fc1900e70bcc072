"""The built-in scripted agent, one behaviour per test (``taskplane/bridge/scripted.py``).

ping, ask, form (with and without activating ``elicitation/v1``), auth, sleep, reject,
fail, output, echo, and the a2a-tck ``messageId`` prefixes.
"""

from __future__ import annotations

import base64
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import trio

from taskplane.app import PlaneOptions
from taskplane.bridge.scripted import FORM_SCHEMA, ScriptedRuntime
from taskplane.bridge.tool_api import TaskTools
from taskplane.extensions import (
    ELICITATION_KEY,
    ELICITATION_URI,
    OUTFITTER_TASK_KEY,
    OUTFITTER_TASK_URI,
)
from tests.acceptance._support import (
    AUTH_REQUIRED,
    COMPLETED,
    IMMEDIATE,
    INPUT_REQUIRED,
    REJECTED,
    SUBMITTED,
    WORKING,
    Server,
    get_task,
    send,
    send_task,
    serve,
    store_view,
)
from tests.support.plane import send_body

EXTENSIONS_HEADER = "A2A-Extensions"


class CountingRuntime(ScriptedRuntime):
    """The scripted agent, counting the turns it is offered per Task."""

    def __init__(self) -> None:
        self.turns: Counter[str] = Counter()

    async def run_turn(self, task_id: str, prompt: str, tools: TaskTools) -> None:
        self.turns[task_id] += 1
        await super().run_turn(task_id, prompt, tools)


@pytest.fixture
async def short_timeout(tmp_path: Path) -> AsyncIterator[tuple[Server, CountingRuntime]]:
    """A server whose blocking sends give up after 1 s, with a turn-counting agent."""
    runtime = CountingRuntime()
    async with serve(
        tmp_path / "short", options=PlaneOptions(runtime=runtime), blocking_timeout_s=1.0
    ) as server:
        yield server, runtime


async def test_ping_returns_a_direct_pong_message_and_no_task(client: httpx.AsyncClient) -> None:
    response = await send(client, "ping", "agent-ping-1")
    assert response.status_code == 200, response.text
    message = response.json()["message"]
    assert message["role"] == "ROLE_AGENT"
    assert message["parts"] == [{"text": "pong"}]
    assert "taskId" not in message
    assert (await store_view(client))["totalSize"] == 0


async def test_ask_requires_input_and_the_follow_up_completes_quoting_the_answer(
    client: httpx.AsyncClient,
) -> None:
    asked = await send_task(client, "ask: What is your quest?", "agent-ask-1")
    assert asked["status"]["state"] == INPUT_REQUIRED
    assert asked["status"]["message"]["parts"] == [{"text": "What is your quest?"}]
    assert asked["history"][-1] == asked["status"]["message"]

    answered = await send_task(client, "the grail", "agent-ask-2", taskId=asked["id"])
    assert answered["status"]["state"] == COMPLETED
    assert answered["artifacts"] == [
        {
            "artifactId": f"response-{asked['id']}",
            "name": "response",
            "parts": [{"text": "You answered: the grail"}],
        }
    ]


async def test_form_without_activating_elicitation_asks_in_plain_text_only(
    client: httpx.AsyncClient,
) -> None:
    response = await send(client, "form: Pick a name", "agent-form-1")
    assert response.status_code == 200, response.text
    assert EXTENSIONS_HEADER not in response.headers
    task = response.json()["task"]
    assert task["status"]["state"] == INPUT_REQUIRED
    question = task["status"]["message"]
    assert question["parts"] == [{"text": "Pick a name"}]
    assert "extensions" not in question

    answered = await send_task(client, "Arthur", "agent-form-2", taskId=task["id"])
    assert answered["status"]["state"] == COMPLETED
    assert answered["artifacts"][0]["parts"] == [{"text": "You answered: Arthur"}]


async def test_form_with_elicitation_activated_adds_the_typed_data_part(
    client: httpx.AsyncClient,
) -> None:
    headers = {EXTENSIONS_HEADER: f"{ELICITATION_URI}, https://example.com/unknown-ext/v9"}
    response = await client.post(
        "/message:send", json=send_body("form: Pick a name", "agent-form-3"), headers=headers
    )
    assert response.status_code == 200, response.text
    # Only the supported, requested URI is echoed.
    assert response.headers[EXTENSIONS_HEADER] == ELICITATION_URI
    task = response.json()["task"]
    assert task["status"]["state"] == INPUT_REQUIRED
    question = task["status"]["message"]
    assert question["parts"] == [
        {"text": "Pick a name"},
        {"data": {ELICITATION_KEY: {"message": "Pick a name", "requestedSchema": FORM_SCHEMA}}},
    ]
    assert question["extensions"] == [ELICITATION_URI]

    reply = send_body(
        'Accepted requested input: {"answer": "Arthur"}',
        "agent-form-4",
        taskId=task["id"],
    )
    reply["message"]["parts"].append(
        {"data": {ELICITATION_KEY: {"action": "accept", "content": {"answer": "Arthur"}}}}
    )
    answered = await client.post("/message:send", json=reply, headers=headers)
    assert answered.status_code == 200, answered.text
    assert answered.headers[EXTENSIONS_HEADER] == ELICITATION_URI
    assert answered.json()["task"]["status"]["state"] == COMPLETED


async def test_auth_requires_authentication_with_the_text(client: httpx.AsyncClient) -> None:
    task = await send_task(client, "auth: Sign in at https://example.com", "agent-auth-1")
    assert task["status"]["state"] == AUTH_REQUIRED
    assert task["status"]["message"]["role"] == "ROLE_AGENT"
    assert task["status"]["message"]["parts"] == [{"text": "Sign in at https://example.com"}]
    assert "artifacts" not in task


async def test_sleep_works_for_the_given_time_then_completes(client: httpx.AsyncClient) -> None:
    queued = await send_task(client, "sleep: 150", "agent-sleep-1", configuration=IMMEDIATE)
    assert queued["status"]["state"] == SUBMITTED
    done = await send_task(client, "sleep: 10", "agent-sleep-2")
    assert done["status"]["state"] == COMPLETED
    assert done["artifacts"][0]["parts"] == [{"text": "Slept 10 ms."}]
    first = await get_task(client, queued["id"])
    assert first["status"]["state"] == COMPLETED
    assert first["artifacts"][0]["parts"] == [{"text": "Slept 150 ms."}]


async def test_reject_rejects_with_the_reason(client: httpx.AsyncClient) -> None:
    task = await send_task(client, "reject: not my department", "agent-reject-1")
    assert task["status"]["state"] == REJECTED
    assert task["status"]["message"]["role"] == "ROLE_AGENT"
    assert task["status"]["message"]["parts"] == [{"text": "not my department"}]
    assert "artifacts" not in task


@pytest.mark.slow  # real time: the retries wait 1 s and 2 s (tests.support.tiers)
async def test_fail_keeps_the_task_working_while_retried_then_fails_it_with_the_reason(
    short_timeout: tuple[Server, CountingRuntime],
) -> None:
    server, runtime = short_timeout
    # The blocking send is bounded: it returns the current snapshot, not an error.
    # (Three failed turns in 30 ms, then a 1 s pause: the Task is WORKING at 1 s.)
    stuck = await send_task(server.client, "fail", "agent-fail-1")
    assert stuck["status"]["state"] == WORKING
    assert runtime.turns[stuck["id"]] >= 3
    # The agent moved on meanwhile ...
    after = await send_task(server.client, "next", "agent-fail-2")
    assert after["status"]["state"] == COMPLETED
    # ... and the failing Task, retried after 1 s and 2 s, ends FAILED at its 5th
    # delivery with an agent status message giving the reason (the time line is
    # checked in virtual time in tests/actors/test_concurrent_turns.py).
    with trio.fail_after(30):
        while True:
            task = await get_task(server.client, stuck["id"])
            if task["status"]["state"] != WORKING:
                break
            await trio.sleep(0.05)
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert runtime.turns[stuck["id"]] == 5
    reason = task["status"]["message"]
    assert reason["role"] == "ROLE_AGENT"
    assert reason["parts"] == [
        {
            "text": "The agent could not finish this task: its turn failed 5 times "
            "(RuntimeError: the scripted agent was told to fail this turn). "
            "Send a new message to try again."
        }
    ]
    first, last = task["history"]  # the caller's message, then the reason
    assert first["messageId"] == "agent-fail-1" and last == reason
    assert "artifacts" not in task


async def test_fail_leaves_the_activation_replayable_after_restart(tmp_path: Path) -> None:
    root = tmp_path / "replay"
    first = CountingRuntime()
    async with serve(root, options=PlaneOptions(runtime=first)) as server:
        stuck = await send_task(server.client, "fail", "agent-replay-1", configuration=IMMEDIATE)
        await send_task(server.client, "barrier", "agent-replay-2")
        assert first.turns[stuck["id"]] == 3

    second = CountingRuntime()
    async with serve(root, options=PlaneOptions(runtime=second)) as server:
        await send_task(server.client, "barrier after restart", "agent-replay-3")
        # Offered again after the restart (how many times is bounded by the durable
        # delivery cap, which the three failed turns before the restart count toward).
        assert second.turns[stuck["id"]] >= 1
        # Failure is visible: the 5th delivery fails too, and the Task ends FAILED with
        # the reason instead of staying WORKING.
        with trio.fail_after(30):
            while True:
                task = await get_task(server.client, stuck["id"])
                if task["status"]["state"] != WORKING:
                    break
                await trio.sleep(0.05)
        assert task["status"]["state"] == "TASK_STATE_FAILED"
        assert "its turn failed 5 times" in task["status"]["message"]["parts"][0]["text"]
        assert second.turns[stuck["id"]] == 2  # deliveries 4 and 5


async def test_output_records_a_declared_output_then_completes(
    client: httpx.AsyncClient,
) -> None:
    task = await send_task(
        client,
        'output: pull-request {"number": 7}',
        "agent-output-1",
        extensions=[OUTFITTER_TASK_URI],
    )
    assert task["status"]["state"] == COMPLETED
    output, response = task["artifacts"]
    assert output == {
        "artifactId": f"output-pull-request-{task['id']}",
        "name": "pull-request",
        "parts": [{"data": {"number": 7}}],
        "metadata": {
            OUTFITTER_TASK_KEY: {
                "output": "pull-request",
                "type": "pull-request",
                "value": {"number": 7},
            }
        },
        "extensions": [OUTFITTER_TASK_URI],
    }
    assert response["name"] == "response"
    assert response["parts"] == [{"text": "Recorded output pull-request."}]


async def test_an_output_artifact_lists_the_outfitter_task_uri_only_when_activated(
    client: httpx.AsyncClient,
) -> None:
    task = await send_task(client, 'output: pull-request {"number": 8}', "agent-output-2")
    assert task["status"]["state"] == COMPLETED
    output = task["artifacts"][0]
    assert output["name"] == "pull-request"
    assert "extensions" not in output
    assert output["metadata"][OUTFITTER_TASK_KEY]["value"] == {"number": 8}


async def test_anything_else_completes_with_an_echo(client: httpx.AsyncClient) -> None:
    task = await send_task(client, "Hello, plane!", "agent-echo-1")
    assert task["status"]["state"] == COMPLETED
    assert task["artifacts"] == [
        {
            "artifactId": f"response-{task['id']}",
            "name": "response",
            "parts": [{"text": "Hello, plane!"}],
        }
    ]
    assert [m["messageId"] for m in task["history"]] == ["agent-echo-1"]


async def test_tck_complete_task_completes_with_hello_from_tck(
    client: httpx.AsyncClient,
) -> None:
    task = await send_task(client, "anything", "tck-complete-task-0a1b2c3d")
    assert task["status"]["state"] == COMPLETED
    assert task["artifacts"][0]["parts"] == [{"text": "Hello from TCK"}]


async def test_tck_artifact_file_completes_with_a_raw_file_artifact(
    client: httpx.AsyncClient,
) -> None:
    task = await send_task(client, "anything", "tck-artifact-file-0a1b2c3d")
    assert task["status"]["state"] == COMPLETED
    files = [p for a in task["artifacts"] for p in a["parts"] if "raw" in p]
    assert len(files) == 1
    assert files[0]["filename"] == "output.txt"
    assert files[0]["mediaType"] == "text/plain"
    assert base64.b64decode(files[0]["raw"], validate=True)


async def test_tck_message_response_replies_with_a_direct_message(
    client: httpx.AsyncClient,
) -> None:
    response = await send(client, "anything", "tck-message-response-0a1b2c3d")
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"message"}
    assert body["message"]["role"] == "ROLE_AGENT"
    assert body["message"]["parts"] == [{"text": "Direct message response"}]
    assert (await store_view(client))["totalSize"] == 0


LONG = "q" * 40_001  # one character over the task tools' text limit


@pytest.mark.parametrize(
    ("text", "state"),
    [
        (f"ask: {LONG}", INPUT_REQUIRED),
        (f"auth: {LONG}", AUTH_REQUIRED),
        (f"reject: {LONG}", REJECTED),
        (LONG, COMPLETED),
    ],
)
async def test_caller_text_over_the_tool_limit_still_moves_the_task(
    client: httpx.AsyncClient, text: str, state: str
) -> None:
    task = await send_task(client, text, f"agent-long-{state}")
    assert task["status"]["state"] == state
    quoted = (task["status"].get("message") or task["artifacts"][0])["parts"][0]["text"]
    assert len(quoted) == 40_000
    assert quoted.endswith("…")


async def test_an_over_long_answer_completes_the_asked_task(client: httpx.AsyncClient) -> None:
    asked = await send_task(client, "ask: name?", "agent-long-answer-1")
    answered = await send_task(client, LONG, "agent-long-answer-2", taskId=asked["id"])
    assert answered["status"]["state"] == COMPLETED
    assert len(answered["artifacts"][0]["parts"][0]["text"]) == 40_000


@pytest.mark.parametrize(
    ("prefix", "first_part_key"),
    [("tck-artifact-file-url", "url"), ("tck-artifact-file", "raw"), ("tck-artifact-data", "data")],
)
async def test_tck_artifact_fixtures_put_the_file_or_data_part_first(
    client: httpx.AsyncClient, prefix: str, first_part_key: str
) -> None:
    task = await send_task(client, "anything", f"{prefix}-0a1b2c3d")
    parts = task["artifacts"][0]["parts"]
    assert first_part_key in parts[0]
    assert "text" in parts[-1]


async def test_a_reply_to_tck_input_required_follows_its_own_message_id_prefix(
    client: httpx.AsyncClient,
) -> None:
    asked = await send_task(client, "anything", "tck-input-required-0a1b2c3d")
    assert asked["status"]["state"] == INPUT_REQUIRED
    replied = await send_task(client, "x", "tck-complete-task-9f8e", taskId=asked["id"])
    assert replied["status"]["state"] == COMPLETED
    assert replied["artifacts"][0]["parts"] == [{"text": "Hello from TCK"}]


async def test_a_plain_reply_to_tck_input_required_keeps_the_task_waiting(
    client: httpx.AsyncClient,
) -> None:
    """The kit's scenario: a message with the ``tck-input-required`` prefix puts the
    Task in INPUT_REQUIRED, and nothing in it completes the Task; a follow-up without
    another TCK prefix leaves it waiting (the agent asks again)."""
    asked = await send_task(client, "anything", "tck-input-required-1a2b3c4d")
    for n, message_id in enumerate(("plain-reply-1", "tck-input-required-2b3c")):
        replied = await send_task(client, "x", message_id, taskId=asked["id"])
        assert replied["status"]["state"] == INPUT_REQUIRED, replied
        assert not replied.get("artifacts")
        assert replied["status"]["message"]["parts"] == [{"text": "Please provide input"}]
        assert len(replied["history"]) == 2 * n + 4  # ask, reply, ask again, ...


def test_a_scripted_sleep_is_capped_at_max_sleep_ms() -> None:
    from taskplane.bridge.scripted import MAX_SLEEP_MS, _sleep_ms

    assert MAX_SLEEP_MS == 600_000
    assert _sleep_ms("700000") == MAX_SLEEP_MS
    assert _sleep_ms("-5") == 0
    assert _sleep_ms("soon") == 0
