"""The ``subprocess`` runtime against real agent programs (the example echo agent and a
misbehaving variant of it), with an in-memory toolbox: turns, concurrent turns, a
program that crashes mid-turn, a turn that is never answered, release."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trio.testing

from taskplane.bridge.runtime import session_id, wake_prompt
from taskplane.bridge.subprocess_runtime import AgentTurnFailed, SubprocessRuntime
from taskplane.bridge.tool_schemas import tool_specs
from tests.bridge._support import ECHO_AGENT, INJECTION, MISBEHAVING_AGENT, FakeTools, task_with

pytestmark = pytest.mark.slow  # real agent programs (tests.support.tiers)

TURN_DEADLINE_S = 20.0
"""Upper bound for a turn of a local agent program (a hung test fails, never blocks)."""


async def _open(command: tuple[str, ...], root: Path) -> AsyncIterator[SubprocessRuntime]:
    runtime = SubprocessRuntime(command, root)
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.serve)
        yield runtime
        await runtime.aclose()
        nursery.cancel_scope.cancel()


@pytest.fixture
async def echo(tmp_path: Path) -> AsyncIterator[SubprocessRuntime]:
    async for runtime in _open(ECHO_AGENT, tmp_path):
        yield runtime


@pytest.fixture
async def misbehaving(tmp_path: Path) -> AsyncIterator[SubprocessRuntime]:
    async for runtime in _open(MISBEHAVING_AGENT, tmp_path):
        yield runtime


async def _turn(runtime: SubprocessRuntime, tools: FakeTools) -> None:
    with trio.fail_after(TURN_DEADLINE_S):
        await runtime.run_turn(tools.task.id, wake_prompt(tools.task.id), tools)


async def test_the_echo_agent_reads_the_task_and_completes_it_with_the_text(
    echo: SubprocessRuntime, tmp_path: Path
) -> None:
    tools = FakeTools(task_with("t-echo", "Hello, agent"))
    await _turn(echo, tools)
    assert tools.calls == [
        ("a2a_read_task", "t-echo", {}),
        ("a2a_complete_task", "t-echo", {"response": "Hello, agent", "outcome": "completed"}),
    ]
    log = tmp_path / "agent-sessions" / session_id("t-echo") / "turns.log"
    assert log.read_text() == "a2a_complete_task\n"


async def test_a_question_then_its_answer_completes_with_the_answer(
    echo: SubprocessRuntime,
) -> None:
    asking = FakeTools(task_with("t-ask", "ask: Which branch?"))
    await _turn(echo, asking)
    assert asking.calls[-1] == ("a2a_require_input", "t-ask", {"question": "Which branch?"})
    answered = FakeTools(task_with("t-ask", "ask: Which branch?", "Which branch?", "main"))
    await _turn(echo, answered)
    assert answered.calls[-1][2]["response"] == "You answered: main"


async def test_several_turns_of_different_tasks_are_open_at_once(
    misbehaving: SubprocessRuntime,
) -> None:
    hung = FakeTools(task_with("t-hang", "hang"))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(misbehaving.run_turn, "t-hang", wake_prompt("t-hang"), hung)
        # While the first turn stays open, others start and finish.
        others = [FakeTools(task_with(f"t-{i}", f"text {i}")) for i in range(5)]
        async with trio.open_nursery() as inner:
            for tools in others:
                inner.start_soon(_turn, misbehaving, tools)
        for i, tools in enumerate(others):
            assert tools.calls[-1] == (
                "a2a_complete_task",
                f"t-{i}",
                {"response": f"text {i}", "outcome": "completed"},
            )
        assert hung.calls == [("a2a_read_task", "t-hang", {})]
        nursery.cancel_scope.cancel()


async def test_a_turn_that_is_never_answered_can_be_cancelled_and_the_agent_is_told(
    misbehaving: SubprocessRuntime, tmp_path: Path
) -> None:
    hung = FakeTools(task_with("t-hang", "hang"))
    with trio.move_on_after(TURN_DEADLINE_S) as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(misbehaving.run_turn, "t-hang", wake_prompt("t-hang"), hung)
            await hung.read.wait()
            nursery.cancel_scope.cancel()
    assert not scope.cancelled_caught
    # The program got ``cancel`` and still serves new turns (its stdin is ordered: the
    # notification was handled before the next turn's request).
    tools = FakeTools(task_with("t-after", "after"))
    await _turn(misbehaving, tools)
    assert tools.calls[-1][2]["response"] == "after"
    received = tmp_path / "agent-sessions" / session_id("t-hang") / "received.jsonl"
    methods = [json.loads(line) for line in received.read_text().splitlines()]
    assert [m["method"] for m in methods] == ["turn", "cancel"]
    assert methods[1] == {"jsonrpc": "2.0", "method": "cancel", "params": {"taskId": "t-hang"}}
    await misbehaving.release("t-hang")
    await _turn(misbehaving, FakeTools(task_with("t-after-2", "again")))
    last = json.loads(received.read_text().splitlines()[-1])
    assert last["method"] == "release"
    assert last["params"] == {"taskId": "t-hang", "sessionId": session_id("t-hang")}


async def test_a_program_that_crashes_mid_turn_fails_the_turn_and_is_restarted(
    misbehaving: SubprocessRuntime,
) -> None:
    crashing = FakeTools(task_with("t-crash", "crash"))
    with pytest.raises(AgentTurnFailed, match="exited with code 3"):
        await _turn(misbehaving, crashing)
    assert crashing.calls == [("a2a_read_task", "t-crash", {})]
    # The retry (the wake queue's) waits for the restarted program and completes.
    await _turn(misbehaving, crashing)
    assert crashing.calls[-1][2]["response"] == "crash"


async def test_the_turn_request_carries_the_body_free_prompt_session_and_tool_schemas(
    misbehaving: SubprocessRuntime, tmp_path: Path
) -> None:
    tools = FakeTools(task_with("t-inject", INJECTION))
    await _turn(misbehaving, tools)
    directory = tmp_path / "agent-sessions" / session_id("t-inject")
    (line,) = (directory / "received.jsonl").read_text().splitlines()
    request = json.loads(line)
    assert request["method"] == "turn"
    assert request["params"] == {
        "taskId": "t-inject",
        "sessionId": session_id("t-inject"),
        "sessionDir": str(directory),
        "prompt": wake_prompt("t-inject"),
        "tools": tool_specs(),
    }
    # No part of the caller's text reached the agent outside a tool result.
    for fragment in INJECTION.splitlines():
        assert fragment not in line


async def test_a_refused_tool_call_is_a_json_rpc_error_and_fails_the_echo_turn(
    echo: SubprocessRuntime,
) -> None:
    class Refusing(FakeTools):
        async def a2a_complete_task(self, *args: object, **kwargs: object) -> object:  # type: ignore[override]
            from taskplane.errors import ToolError

            raise ToolError("task t-ref is COMPLETED and cannot change")

    tools = Refusing(task_with("t-ref", "hello"))
    with pytest.raises(AgentTurnFailed, match="cannot change"):
        await _turn(echo, tools)


async def test_a_command_that_cannot_start_is_an_error_at_startup(tmp_path: Path) -> None:
    runtime = SubprocessRuntime(("/nonexistent/agent-program",), tmp_path)
    with pytest.raises(OSError, match="cannot start A2A_AGENT_COMMAND"):
        await runtime.serve()


async def test_a_native_tasks_turn_request_offers_the_channel_tools(
    misbehaving: SubprocessRuntime, tmp_path: Path
) -> None:
    tools = FakeTools(task_with("t-native", "hello"), channel_tools=True)
    await _turn(misbehaving, tools)
    directory = tmp_path / "agent-sessions" / session_id("t-native")
    (line,) = (directory / "received.jsonl").read_text().splitlines()
    offered = json.loads(line)["params"]["tools"]
    assert offered == tool_specs(channels=True)
    assert [t["name"] for t in offered][-2:] == ["channel_read", "channel_publish"]
