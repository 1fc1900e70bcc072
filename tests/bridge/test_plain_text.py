"""Turns that end without settling the Task: the reminder within the turn, and the
``A2A_AGENT_PLAIN_TEXT`` policies, for the ``openai`` runtime against the scripted
OpenAI-compatible server and for the ``python`` runtime; and, through the wake queue,
a Task given up on at once with the agent's text in its status message."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import openai
import pytest
import trio
import trio.testing

from taskplane.app import PlaneOptions
from taskplane.bridge.openai_runtime import OpenAIRuntime
from taskplane.bridge.python_runtime import PythonRuntime, TurnTools
from taskplane.bridge.runtime import session_id, wake_prompt
from taskplane.bridge.sessions import FileTranscriptStore, Profile
from taskplane.bridge.subprocess_runtime import SubprocessRuntime
from taskplane.bridge.tools import MAX_LOG_TEXT_CHARS, MAX_TEXT_CHARS
from taskplane.bridge.turn_outcome import (
    MAX_REMINDERS,
    PlainTextPolicy,
    TurnUnsettled,
    reminder_prompt,
)
from taskplane.model.enums import TaskState
from tests.bridge._support import AGENTS, FakeTools, task_with
from tests.bridge.fake_openai import WAKE, Body, FakeOpenAI
from tests.support.plane import open_test_plane
from tests.support.virtual import (
    events,
    evidence,
    journal,
    send,
    settle,
    task_id_of,
    virtual_now_ms,
)

TURN_DEADLINE_S = 20.0
CHATTY_AGENT = (sys.executable, str(AGENTS / "chatty_agent.py"))
ANSWER = "The capital of France is Paris."


def chatty_model(*, obeys: bool) -> Any:
    """A model that reads the Task, then answers in plain text; reminded, it calls
    ``a2a_complete_task`` with that answer if ``obeys``, else answers in text again."""

    def model(messages: list[Body]) -> tuple[str | None, list[tuple[str, Body]]]:
        task_id = next(
            m.group(1)
            for m in (WAKE.search(x.get("content") or "") for x in messages if x["role"] == "user")
            if m
        )
        last = messages[-1]
        if last["role"] == "user" and "is not finished" in last["content"]:
            if obeys:
                return None, [("a2a_complete_task", {"taskId": task_id, "response": ANSWER})]
            return f"{ANSWER} (again)", []
        if last["role"] == "user":
            return None, [("a2a_read_task", {"taskId": task_id})]
        if last["role"] == "tool" and "is completed" in last["content"]:
            return "Done.", []
        return ANSWER, []

    return model


def _runtime(url: str, root: Path, policy: PlainTextPolicy) -> OpenAIRuntime:
    client = openai.AsyncOpenAI(
        api_key="sk-test", base_url=url, max_retries=0, http_client=openai.DefaultAsyncHttpxClient()
    )
    return OpenAIRuntime(client, Profile("m", "SYS"), FileTranscriptStore(root), plain_text=policy)


async def _turn(runtime: Any, tools: FakeTools) -> None:
    with trio.fail_after(TURN_DEADLINE_S):
        await runtime.run_turn(tools.task.id, wake_prompt(tools.task.id), tools)


def _transcript(root: Path, task_id: str) -> list[dict[str, Any]]:
    path = root / "agent-sessions" / session_id(task_id) / "transcript.json"
    messages: list[dict[str, Any]] = json.loads(path.read_text())["messages"]
    return messages


async def test_policy_complete_makes_the_plain_answer_the_response(
    fake_openai: tuple[FakeOpenAI, str], tmp_path: Path
) -> None:
    server, url = fake_openai
    server.model = chatty_model(obeys=False)
    runtime = _runtime(url, tmp_path, PlainTextPolicy.COMPLETE)
    tools = FakeTools(task_with("t-pc", "What is the capital of France?"))
    started = trio.current_time()
    await _turn(runtime, tools)
    elapsed = trio.current_time() - started
    await runtime.aclose()
    assert tools.calls[-1] == (
        "a2a_complete_task",
        "t-pc",
        {"response": ANSWER, "outcome": "completed"},
    )
    assert len(server.requests) == 2  # read, then the plain answer: no reminder
    assert {"role": "assistant", "content": ANSWER} in _transcript(tmp_path, "t-pc")
    print(f"policy complete: settled in {elapsed * 1000:.0f} ms, 2 model calls")


async def test_policy_remind_reminds_in_the_same_session_then_the_model_completes(
    fake_openai: tuple[FakeOpenAI, str], tmp_path: Path
) -> None:
    server, url = fake_openai
    server.model = chatty_model(obeys=True)
    runtime = _runtime(url, tmp_path, PlainTextPolicy.REMIND)
    tools = FakeTools(task_with("t-pr", "What is the capital of France?"))
    started = trio.current_time()
    await _turn(runtime, tools)
    elapsed = trio.current_time() - started
    await runtime.aclose()
    assert [c[0] for c in tools.calls] == ["a2a_read_task", "a2a_complete_task"]
    assert tools.calls[-1][2]["response"] == ANSWER
    # read, plain answer, (reminder) complete, final "Done.": one turn, one session.
    assert len(server.requests) == 4
    reminded = server.requests[2]["messages"]
    assert reminded[-2] == {"role": "assistant", "content": ANSWER}
    assert reminded[-1] == {"role": "user", "content": reminder_prompt("t-pr", 1)}
    assert "a2a_complete_task" in reminder_prompt("t-pr", 1)
    stored = _transcript(tmp_path, "t-pr")
    assert {"role": "assistant", "content": ANSWER} in stored
    assert {"role": "user", "content": reminder_prompt("t-pr", 1)} in stored
    print(f"policy remind: reminded once, settled in {elapsed * 1000:.0f} ms, 4 model calls")


async def test_a_model_that_never_settles_ends_the_turn_with_its_text(
    fake_openai: tuple[FakeOpenAI, str], tmp_path: Path
) -> None:
    server, url = fake_openai
    server.model = chatty_model(obeys=False)
    runtime = _runtime(url, tmp_path, PlainTextPolicy.REMIND)
    tools = FakeTools(task_with("t-pn", "What is the capital of France?"))
    with pytest.raises(TurnUnsettled) as failure:
        await _turn(runtime, tools)
    await runtime.aclose()
    assert failure.value.text == f"{ANSWER} (again)"
    assert ANSWER in str(failure.value)
    assert len(server.requests) == 2 + MAX_REMINDERS  # bounded
    stored = _transcript(tmp_path, "t-pn")
    assert [m for m in stored if m["role"] == "user"][1:] == [
        {"role": "user", "content": reminder_prompt("t-pn", n)} for n in range(1, MAX_REMINDERS + 1)
    ]


async def test_policy_fail_ends_the_turn_at_once_with_the_text(
    fake_openai: tuple[FakeOpenAI, str], tmp_path: Path
) -> None:
    server, url = fake_openai
    server.model = chatty_model(obeys=True)
    runtime = _runtime(url, tmp_path, PlainTextPolicy.FAIL)
    with pytest.raises(TurnUnsettled, match="A2A_AGENT_PLAIN_TEXT=fail") as failure:
        await _turn(runtime, FakeTools(task_with("t-pf", "What is the capital of France?")))
    await runtime.aclose()
    assert failure.value.text == ANSWER
    assert len(server.requests) == 2


# ---- the python runtime (in process) -----------------------------------------------


async def test_a_python_agent_that_returns_text_completes_under_policy_complete(
    tmp_path: Path,
) -> None:
    async def agent(prompt: str, tools: TurnTools) -> str:
        await tools.read()
        return "plain answer"

    runtime = PythonRuntime(agent, tmp_path, plain_text=PlainTextPolicy.COMPLETE)
    tools = FakeTools(task_with("t-py1", "hi"))
    await _turn(runtime, tools)
    assert tools.calls[-1][2] == {"response": "plain answer", "outcome": "completed"}


async def test_a_python_agent_that_forgets_to_complete_is_called_again_with_a_reminder(
    tmp_path: Path,
) -> None:
    prompts: list[str] = []

    async def agent(prompt: str, tools: TurnTools) -> None:
        prompts.append(prompt)
        if "is not finished" in prompt:
            await tools.complete("finished now")

    runtime = PythonRuntime(agent, tmp_path)
    tools = FakeTools(task_with("t-py2", "hi"))
    await _turn(runtime, tools)
    assert prompts == [wake_prompt("t-py2"), reminder_prompt("t-py2", 1)]
    assert tools.calls == [
        ("a2a_complete_task", "t-py2", {"response": "finished now", "outcome": "completed"})
    ]


async def test_a_plain_answer_over_the_text_bound_is_cut_with_a_marker_under_complete(
    tmp_path: Path,
) -> None:
    long_answer = "x" * 50_000

    async def agent(prompt: str, tools: TurnTools) -> str:
        return long_answer

    runtime = PythonRuntime(agent, tmp_path, plain_text=PlainTextPolicy.COMPLETE)
    tools = FakeTools(task_with("t-py-long", "hi"))
    await _turn(runtime, tools)
    response = tools.calls[-1][2]["response"]
    assert len(response) <= MAX_TEXT_CHARS
    kept = response.index("\n[")
    assert response[:kept] == long_answer[:kept]
    assert response.endswith(f"[{50_000 - kept} more characters cut]")


# ---- through the wake queue --------------------------------------------------------


async def test_an_unsettled_turn_fails_the_task_at_once_with_the_agents_text(
    store_root: Path,
) -> None:
    # Real time: the python runtime creates its session directory in a worker thread.
    async def agent(prompt: str, tools: TurnTools) -> str:
        return f"just text for {tools.task_id}"

    runtime = PythonRuntime(agent, store_root, plain_text=PlainTextPolicy.FAIL)
    plane_options = PlaneOptions(runtime=runtime, now_ms=virtual_now_ms, store_in_thread=False)
    async with open_test_plane(store_root, plane_options) as plane:
        started = trio.current_time()
        task_id = task_id_of(await send(plane, "hello", "m-unsettled"))
        failed = await settle(plane, task_id)
        elapsed = trio.current_time() - started
        assert failed.status.state is TaskState.TASK_STATE_FAILED
        assert failed.status.message is not None
        reason = failed.status.message.parts[0].text or ""
        assert f"just text for {task_id}" in reason
        rows = await journal(plane, task_id=task_id)
        assert [r["delivery"] for k, _, r in rows if k == "WAKE_DELIVERED"] == [1]
        assert [k for k, _, _ in rows].count("WAKE_FAILED") == 1
        assert elapsed < 1.0  # no retries, no pauses (the first pause alone is 1 s)


async def test_a_task_failed_by_the_policy_does_not_count_against_readiness(
    store_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A model ignoring its tools (perhaps provoked by a caller) is a policy outcome,
    # not ill-health: the node stays ready; the long text is cut in log lines.
    async def agent(prompt: str, tools: TurnTools) -> str:
        return "y" * 50_000

    runtime = PythonRuntime(agent, store_root, plain_text=PlainTextPolicy.FAIL)
    plane_options = PlaneOptions(runtime=runtime, now_ms=virtual_now_ms, store_in_thread=False)
    async with open_test_plane(store_root, plane_options) as plane:
        task_id = task_id_of(await send(plane, "hello", "m-policy"))
        failed = await settle(plane, task_id)
        assert failed.status.state is TaskState.TASK_STATE_FAILED
        assert await evidence(plane, "activation.unhealthy") == []
        assert [e["taskId"] for e in await evidence(plane, "activation.unsettled")] == [task_id]
        assert (await plane.store.counts(0)).unhealthy_after_ms == 0
        assert failed.status.message is not None
        reason = failed.status.message.parts[0].text or ""
        assert "more characters cut]" in reason and len(reason) < MAX_TEXT_CHARS + 1_000
    (abandoned,) = events(caplog, "a2a_wake_abandoned")
    assert abandoned.levelno == logging.WARNING
    assert len(abandoned.getMessage()) < MAX_LOG_TEXT_CHARS + 200
    assert abandoned.getMessage().endswith("more characters cut]")


# ---- the subprocess runtime (a real agent program) ---------------------------------


@pytest.mark.slow  # an agent program
@pytest.mark.parametrize("policy", [PlainTextPolicy.REMIND, PlainTextPolicy.COMPLETE])
async def test_a_subprocess_agent_answering_in_plain_text(
    tmp_path: Path, policy: PlainTextPolicy
) -> None:
    runtime = SubprocessRuntime(CHATTY_AGENT, tmp_path, plain_text=policy)
    tools = FakeTools(task_with("t-sub", "question"))
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.serve)
        await _turn(runtime, tools)
        nursery.cancel_scope.cancel()
    # remind: the agent is sent a second turn (the reminder) and completes itself;
    # complete: its plain answer becomes the response at once.
    assert tools.calls == [
        ("a2a_complete_task", "t-sub", {"response": "The answer is 42.", "outcome": "completed"})
    ]
