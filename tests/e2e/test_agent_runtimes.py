"""End to end: ``taskplane serve`` with the ``openai``, ``subprocess`` and ``python``
agent runtimes, as real processes.

The ``openai`` runtime talks to a scripted OpenAI-compatible server served by this
test on a loopback port; the ``subprocess`` runtime runs the example echo agent (with
two test behaviours: crash, hang); the ``python`` runtime the example callable.
"""

from __future__ import annotations

import json
import shlex
import signal
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from taskplane.bridge.runtime import session_id, wake_prompt
from tests.bridge._support import INJECTION, MISBEHAVING_AGENT
from tests.bridge.fake_openai import FakeOpenAI
from tests.e2e._support import logged, send_text
from tests.e2e.taskplane_proc import REPO_ROOT, RunningServer, Spawner

pytestmark = pytest.mark.slow

HTTP_TIMEOUT_S = 30.0
POLL_S = 0.05
API_KEY = "sk-test-never-logged-0123456789abcdef"
COMPLETED = "TASK_STATE_COMPLETED"
INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"


async def serve(spawn: Spawner, env: dict[str, str], store: Path | None = None) -> RunningServer:
    """``taskplane serve`` (started in a thread: this event loop serves the fake)."""
    return await trio.to_thread.run_sync(partial(spawn.serve, store=store, env=env))


def openai_env(url: str) -> dict[str, str]:
    return {
        "A2A_AGENT_RUNTIME": "openai",
        "A2A_AGENT_MODEL": "fake-model",
        "OPENAI_BASE_URL": url,
        "OPENAI_API_KEY": API_KEY,
        "TASKPLANE_LOG_LEVEL": "DEBUG",
    }


async def get(server: RunningServer, task_id: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client:
        response = await client.get(f"{server.url}/tasks/{task_id}", headers=server.auth_headers())
    assert response.status_code == 200, response.text
    task: dict[str, Any] = response.json()
    return task


async def wait_state(server: RunningServer, task_id: str, state: str) -> dict[str, Any]:
    with trio.fail_after(HTTP_TIMEOUT_S):
        while True:
            task = await get(server, task_id)
            if task["status"]["state"] == state:
                return task
            await trio.sleep(0.05)


async def eventually(check: Callable[[], bool]) -> None:
    """Poll ``check`` (state another process writes) until true; fail at the deadline."""
    with trio.fail_after(HTTP_TIMEOUT_S):
        while True:
            if check():
                return
            await trio.sleep(POLL_S)


def response_text(task: dict[str, Any]) -> str:
    (artifact,) = [a for a in task["artifacts"] if a["name"] == "response"]
    return str(artifact["parts"][0]["text"])


async def test_openai_runtime_echoes_through_serve_and_never_logs_the_key(
    spawn: Spawner, fake_openai: tuple[FakeOpenAI, str]
) -> None:
    model, url = fake_openai
    server = await serve(spawn, openai_env(url))
    assert server.card["skills"] == []
    task = await send_text(server, "Hello, model")
    assert task["status"]["state"] == COMPLETED, task
    assert response_text(task) == "Hello, model"
    assert model.requests[0]["model"] == "fake-model"
    assert "task_session_created" in logged(server.process, "task_session_created")
    server.process.stop()
    assert API_KEY not in server.process.stderr() + server.process.stdout()


async def test_openai_question_survives_a_sigkill_and_the_answer_completes_with_the_earlier_turn(
    spawn: Spawner, fake_openai: tuple[FakeOpenAI, str]
) -> None:
    model, url = fake_openai
    server = await serve(spawn, openai_env(url))
    asked = await send_text(server, "ask: Which branch?")
    assert asked["status"]["state"] == INPUT_REQUIRED, asked
    assert asked["status"]["message"]["parts"][0]["text"] == "Which branch?"
    first_turn = [r["messages"] for r in model.requests]
    server.process.signal_and_wait(signal.SIGKILL)

    again = await serve(spawn, openai_env(url), store=server.store)
    model.requests.clear()
    done = await send_text(again, "main", task_id=asked["id"])
    assert done["status"]["state"] == COMPLETED, done
    assert response_text(done) == "You answered: main"
    # The first request after the restart carries the whole earlier turn.
    earlier = first_turn[-1][1:]  # without the system message
    sent = model.requests[0]["messages"]
    assert sent[1 : 1 + len(earlier)] == earlier
    assert any(
        c["function"]["name"] == "a2a_require_input"
        for m in sent
        for c in m.get("tool_calls") or ()
    )
    assert "task_session_reopened" in logged(again.process, "task_session_reopened")


async def test_openai_rate_limit_and_server_error_are_retried_by_the_wake_queue(
    spawn: Spawner, fake_openai: tuple[FakeOpenAI, str]
) -> None:
    # The provider being unavailable pauses the wake (1 s, then 2 s): no failed turn.
    model, url = fake_openai
    server = await serve(spawn, openai_env(url))
    model.failures = [429, 500]
    task = await send_text(server, "retry me")
    assert task["status"]["state"] == COMPLETED, task
    assert response_text(task) == "retry me"
    logged(server.process, "agent_provider_unavailable", at_least=2)
    events = server.process.log_events()
    assert not [e for e in events if e.get("event") == "a2a_wake_failed"]
    paused = [e for e in events if e.get("event") == "agent_provider_unavailable"]
    assert [e["retryInS"] for e in paused] == [1.0, 2.0]


def subprocess_env() -> dict[str, str]:
    return {
        "A2A_AGENT_RUNTIME": "subprocess",
        "A2A_AGENT_COMMAND": shlex.join(MISBEHAVING_AGENT),
    }


async def test_subprocess_runtime_serves_the_echo_agent_end_to_end(spawn: Spawner) -> None:
    server = await serve(spawn, subprocess_env())
    done = await send_text(server, "Hello, program")
    assert response_text(done) == "Hello, program"
    asked = await send_text(server, "ask: Which branch?")
    assert asked["status"]["state"] == INPUT_REQUIRED
    answered = await send_text(server, "main", task_id=asked["id"])
    assert response_text(answered) == "You answered: main"
    # The agent's stderr is in the server's log.
    logged(server.process, "agent_stderr")
    stderr = [e for e in server.process.log_events() if e.get("event") == "agent_stderr"]
    assert any("echo agent ready" in str(e["message"]) for e in stderr)


async def test_subprocess_agent_crashing_mid_turn_is_restarted_and_the_retry_completes(
    spawn: Spawner,
) -> None:
    server = await serve(spawn, subprocess_env())
    done = await send_text(server, "crash")
    assert done["status"]["state"] == COMPLETED, done
    assert response_text(done) == "crash"
    logged(server.process, "agent_process_exited", "a2a_wake_failed")
    seen = logged(server.process, "agent_process_started", at_least=2)
    assert "agent_process_exited" in seen and "a2a_wake_failed" in seen
    assert seen.count("agent_process_started") == 2


async def test_subprocess_turn_that_never_answers_is_cancelled_with_its_task(
    spawn: Spawner,
) -> None:
    server = await serve(spawn, subprocess_env())
    hung = await send_text(server, "hang", returnImmediately=True)
    await wait_state(server, hung["id"], "TASK_STATE_WORKING")
    received = server.store / "agent-sessions" / session_id(hung["id"]) / "received.jsonl"
    await eventually(received.exists)
    async with httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client:
        canceled = await client.post(
            f"{server.url}/tasks/{hung['id']}:cancel", headers=server.auth_headers()
        )
    assert canceled.status_code == 200, canceled.text
    assert canceled.json()["status"]["state"] == "TASK_STATE_CANCELED"
    # The turn authority is free again: the next Task is served.
    assert response_text(await send_text(server, "next")) == "next"
    await eventually(
        lambda: "cancel" in [json.loads(x)["method"] for x in received.read_text().splitlines()]
    )
    request = json.loads(received.read_text().splitlines()[0])
    assert request["params"]["prompt"] == wake_prompt(hung["id"])


async def test_python_runtime_runs_the_example_callable_with_the_configured_card(
    spawn: Spawner, tmp_path: Path
) -> None:
    skills = [{"id": "echo", "name": "Echo", "description": "Echoes", "tags": ["demo"]}]
    (tmp_path / "skills.json").write_text(json.dumps(skills))
    env = {
        "A2A_AGENT_RUNTIME": "python",
        "A2A_AGENT_CALLABLE": "python_agent:agent",
        "PYTHONPATH": str(REPO_ROOT / "examples"),
        "A2A_AGENT_NAME": "my-echo",
        "A2A_AGENT_DESCRIPTION": "Echoes what you say.",
        "A2A_AGENT_SKILLS_FILE": str(tmp_path / "skills.json"),
    }
    server = await serve(spawn, env)
    assert server.card["name"] == "my-echo"
    assert server.card["description"] == "Echoes what you say."
    assert server.card["skills"] == skills
    asked = await send_text(server, "ask: Which branch?")
    assert asked["status"]["state"] == INPUT_REQUIRED
    answered = await send_text(server, "main", task_id=asked["id"])
    assert response_text(answered) == "You answered: main"
    assert response_text(await send_text(server, INJECTION)) == INJECTION


@pytest.mark.parametrize(
    ("env", "line"),
    [
        ({"A2A_AGENT_RUNTIME": "bogus"}, "A2A_AGENT_RUNTIME='bogus' is not one of"),
        ({"A2A_AGENT_RUNTIME": "openai"}, "A2A_AGENT_RUNTIME=openai needs A2A_AGENT_MODEL"),
        ({"A2A_AGENT_RUNTIME": "subprocess"}, "needs A2A_AGENT_COMMAND"),
        (
            {"A2A_AGENT_RUNTIME": "python", "A2A_AGENT_CALLABLE": "no_such_module:agent"},
            "cannot import no_such_module",
        ),
        (
            {"A2A_AGENT_RUNTIME": "subprocess", "A2A_AGENT_COMMAND": "/nonexistent/agent"},
            "cannot start A2A_AGENT_COMMAND",
        ),
    ],
)
def test_a_bad_agent_setting_stops_startup_with_one_clear_line(
    spawn: Spawner, tmp_path: Path, env: dict[str, str], line: str
) -> None:
    credentials = tmp_path / "credentials.json"
    credentials.write_text(json.dumps({"credentials": [{"token": "t" * 20, "principal": "p"}]}))
    credentials.chmod(0o600)
    process = spawn.start(
        ("serve",),
        spawn.env(
            A2A_SERVER="1",
            A2A_CREDENTIALS_PATH=str(credentials),
            A2A_PORT="0",
            CHANNELS_TASK_STORE_PATH=str(tmp_path / "store"),
            **env,
        ),
    )
    assert process.wait_exit() == 2, process.describe()
    lines = [x for x in process.stderr().splitlines() if x.startswith("taskplane: ")]
    assert len(lines) == 1 and line in lines[0], process.describe()
