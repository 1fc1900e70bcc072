"""Direct Messages from real agents: the ``triage`` call of the subprocess protocol
(the example echo agent), the python runtime's ``triage`` function and the openai
runtime's triage call, through intake: recorded like the scripted agent's replies, a
duplicate answered verbatim without asking the agent again, and a triage past its
bound making the send a Task."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import openai
import pytest
import trio

from taskplane.app import PlaneOptions
from taskplane.bridge.openai_runtime import OpenAIRuntime
from taskplane.bridge.python_runtime import PythonRuntime, TurnTools
from taskplane.bridge.sessions import FileTranscriptStore, Profile
from taskplane.bridge.settings import AgentSettings
from taskplane.bridge.subprocess_runtime import SubprocessRuntime
from taskplane.bridge.tools import UNTRUSTED_BEGIN
from taskplane.bridge.triage import bounded_reply
from taskplane.model.enums import Role, TaskState
from taskplane.model.types import Message, Part
from tests.bridge._support import AGENTS, ECHO_AGENT
from tests.bridge.fake_openai import Body, FakeOpenAI
from tests.support.plane import open_test_plane
from tests.support.virtual import events, send, settle, task_id_of

DEADLINE_S = 20.0
GREETING_REPLY = "Hello! Send me a message and I will echo it back in a task."


@pytest.mark.slow  # a real agent program
async def test_hello_to_a_triaging_subprocess_agent_is_a_direct_message_duplicates_verbatim(
    store_root: Path,
) -> None:
    agent = AgentSettings(runtime="subprocess", command=ECHO_AGENT, triage=True)
    async with open_test_plane(store_root, PlaneOptions(), agent) as plane:
        with trio.fail_after(DEADLINE_S):
            started = trio.current_time()
            first = await send(plane, "hello", "m-hello")
            direct_s = trio.current_time() - started
            again = await send(plane, "hello", "m-hello")
            work = await send(plane, "echo this", "m-work")
            completed = await settle(plane, task_id_of(work))
    assert first.disposition == "created" and first.task is None
    assert first.reply is not None and first.reply.role is Role.ROLE_AGENT
    assert first.reply.parts[0].text == GREETING_REPLY
    assert again.disposition == "duplicate"
    assert again.reply == first.reply  # verbatim: same messageId, parts, ids
    assert completed.status.state is TaskState.TASK_STATE_COMPLETED
    print(f"direct Message from the subprocess agent in {direct_s * 1000:.0f} ms")


async def test_a_python_triage_answers_and_a_slow_one_makes_a_task(store_root: Path) -> None:
    asked: list[str] = []

    async def triage(message: Message) -> str | None:
        text = message.parts[0].text or ""
        asked.append(text)
        if text == "slow":
            await trio.sleep_forever()
        return "pong" if text == "ping" else None

    async def agent(prompt: str, tools: TurnTools) -> None:
        await tools.complete("worked")

    runtime = PythonRuntime(agent, store_root, triage=triage, triage_timeout_s=0.2)
    async with open_test_plane(store_root, PlaneOptions(runtime=runtime)) as plane:
        with trio.fail_after(DEADLINE_S):
            pong = await send(plane, "ping", "m-ping")
            duplicate = await send(plane, "ping", "m-ping")
            started = trio.current_time()
            slow = await send(plane, "slow", "m-slow")
            slow_s = trio.current_time() - started
            done = await settle(plane, task_id_of(slow))
    assert pong.reply is not None and pong.reply.parts[0].text == "pong"
    assert duplicate.reply == pong.reply
    assert asked == ["ping", "slow"]  # the duplicate did not ask the agent again
    assert 0.2 <= slow_s < 5.0
    assert done.status.state is TaskState.TASK_STATE_COMPLETED


def _triaging_model(messages: list[Body]) -> tuple[str | None, list[tuple[str, Body]]]:
    prompt = messages[-1]["content"]
    assert UNTRUSTED_BEGIN in prompt  # the caller's text only inside the markers
    if "| hello" in prompt:
        return None, [("a2a_reply_directly", {"response": "Hi there."})]
    return "task", []


async def test_the_openai_triage_call_may_answer_with_a2a_reply_directly(
    fake_openai: tuple[FakeOpenAI, str], tmp_path: Path
) -> None:
    server, url = fake_openai
    server.model = _triaging_model
    client = openai.AsyncOpenAI(
        api_key="k", base_url=url, max_retries=0, http_client=openai.DefaultAsyncHttpxClient()
    )
    runtime = OpenAIRuntime(client, Profile("m", "SYS"), FileTranscriptStore(tmp_path), triage=True)
    with trio.fail_after(DEADLINE_S):
        hello = await runtime.reply_directly(_message("hello"))
        other = await runtime.reply_directly(_message("fix the build"))
    await runtime.aclose()
    assert _texts(hello) == ["Hi there."]
    assert other is None
    assert [t["function"]["name"] for t in server.requests[0]["tools"]] == ["a2a_reply_directly"]
    off = OpenAIRuntime(
        openai.AsyncOpenAI(api_key="k", base_url=url),
        Profile("m", "S"),
        FileTranscriptStore(tmp_path),
    )
    assert await off.reply_directly(_message("hello")) is None  # off by default: no call
    await off.aclose()
    assert len(server.requests) == 2


def _message(text: str) -> Message:
    return Message(message_id="m", role=Role.ROLE_USER, parts=(Part.from_text(text),))


def _texts(parts: Sequence[Any] | None) -> list[str]:
    return [p.text for p in parts or ()]


@pytest.mark.slow  # a real agent program
async def test_an_agent_program_exiting_during_a_triage_makes_a_task_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    command = (sys.executable, str(AGENTS / "misbehaving_agent.py"))
    runtime = SubprocessRuntime(command, tmp_path, triage=True, triage_timeout_s=60.0)
    message = Message(
        message_id="m-exit", role=Role.ROLE_USER, parts=(Part.from_text("exit during triage"),)
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.serve)
        with trio.fail_after(DEADLINE_S):  # far less than the triage's 60 s
            assert await runtime.reply_directly(message) is None
        nursery.cancel_scope.cancel()
    (failed,) = events(caplog, "agent_triage_failed")
    assert "exited with code 4" in failed.getMessage()


@pytest.mark.parametrize(("answer", "why"), [("", "an empty string"), (12, "12, not a string")])
async def test_an_unusable_triage_answer_makes_a_task_and_says_why(
    caplog: pytest.LogCaptureFixture, answer: Any, why: str
) -> None:
    async def ask() -> Any:
        return answer

    assert await bounded_reply(ask, 1.0, "python") is None
    (record,) = events(caplog, "agent_triage_unusable")
    assert why in record.getMessage()
    assert record.levelname == "WARNING"


async def test_a_declined_triage_makes_a_task_without_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def ask() -> Any:
        return None

    assert await bounded_reply(ask, 1.0, "python") is None
    assert events(caplog, "agent_triage_unusable") == []
