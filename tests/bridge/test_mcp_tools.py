"""MCP tools for LLM agents, against a real MCP server program of our own
(``tests/bridge/agents/mcp_server.py``) on stdio and on streamable HTTP: listing,
calls, bounds (time, size), a failing or crashing server as a tool error, and, through
the ``openai`` runtime and the scripted OpenAI-compatible server, a tool call that
reaches the MCP server and whose result reaches the model and the session."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest
import trio

from taskplane.bridge.mcp_client import MAX_RESULT_CHARS, McpTools
from taskplane.bridge.mcp_config import load_mcp_config
from taskplane.bridge.openai_runtime import OpenAIRuntime
from taskplane.bridge.runtime import session_id, wake_prompt
from taskplane.bridge.sessions import FileTranscriptStore, Profile
from taskplane.bridge.settings import AgentSettings, open_runtime
from taskplane.bridge.tools import UNTRUSTED_BEGIN
from tests.bridge._support import AGENTS, FakeTools, task_with
from tests.bridge.fake_openai import WAKE, Body, FakeOpenAI

pytestmark = pytest.mark.slow  # MCP server programs

MCP_SERVER = str(AGENTS / "mcp_server.py")
DEADLINE_S = 30.0


@pytest.fixture
async def http_port(nursery: trio.Nursery) -> AsyncIterator[int]:
    process = await trio.lowlevel.open_process(
        [sys.executable, MCP_SERVER, "http"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert process.stdout is not None
    with trio.fail_after(DEADLINE_S):
        line = b""
        while not line.endswith(b"\n"):
            line += await process.stdout.receive_some(1)
    yield int(line.split()[1])
    process.kill()
    await process.wait()


def _config(tmp_path: Path, port: int, **extra: Any) -> Path:
    servers = {
        "calc": {
            "command": sys.executable,
            "args": [MCP_SERVER, "stdio"],
            "env": {"MCP_CALL_LOG": str(tmp_path / "calls.jsonl")},
        },
        "web": {"url": f"http://127.0.0.1:{port}/mcp", "headers": {"X-Test": "1"}},
        **extra,
    }
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


async def _serve(nursery: trio.Nursery, tools: McpTools) -> McpTools:
    with trio.fail_after(DEADLINE_S):
        await nursery.start(tools.serve)
    return tools


async def test_tools_of_stdio_and_http_servers_are_listed_and_called(
    nursery: trio.Nursery, tmp_path: Path, http_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    broken = {"broken": {"command": "/nonexistent/mcp-server"}}
    specs = load_mcp_config(str(_config(tmp_path, http_port, **broken)))
    tools = await _serve(nursery, McpTools(specs, call_timeout_s=1.0, start_timeout_s=2.0))
    names = [t.function_name for t in tools.tools]
    assert names == [
        f"{s}__{t}" for s in ("calc", "web") for t in ("add", "fail", "sleep", "big", "crash")
    ]
    assert any(getattr(r, "event", "") == "mcp_server_unavailable" for r in caplog.records)
    with trio.fail_after(DEADLINE_S):
        stdio = await tools.call("calc__add", {"a": 2, "b": 3})
        http = await tools.call("web__add", {"a": 5, "b": 10})
        failed = await tools.call("web__fail", {})
        slow = await tools.call("web__sleep", {})
        big = await tools.call("web__big", {})
        crashed = await tools.call("calc__crash", {})
        again = await tools.call("calc__add", {"a": 1, "b": 1})
    assert stdio.splitlines() == [UNTRUSTED_BEGIN, "| 5", "--- END UNTRUSTED A2A CONTENT ---"]
    assert "| 15" in http
    assert failed.startswith("error: the tool reported an error") and "on purpose" in failed
    assert slow.startswith("error: MCP server web failed the call: no answer within 1 s")
    assert f"[{100_000 - MAX_RESULT_CHARS} more characters cut]" in big
    assert crashed.startswith("error: MCP server calc failed the call")
    assert "| 2" in again  # restarted, session opened again
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert calls[0] == {"name": "add", "arguments": {"a": 2, "b": 3}}


def _mcp_model(messages: list[Body]) -> tuple[str | None, list[tuple[str, Body]]]:
    task_id = next(
        m.group(1)
        for m in (WAKE.search(x.get("content") or "") for x in messages if x["role"] == "user")
        if m
    )
    last = messages[-1]
    if last["role"] == "user":
        return None, [("calc__add", {"a": 2, "b": 3}), ("web__add", {"a": 5, "b": 10})]
    tool_results = [m["content"] for m in messages if m["role"] == "tool"]
    if len(tool_results) == 2:
        sums = [
            line[2:] for text in tool_results for line in text.splitlines() if line.startswith("| ")
        ]
        return None, [("a2a_complete_task", {"taskId": task_id, "response": " and ".join(sums)})]
    return "Done.", []


async def test_an_mcp_tool_call_reaches_the_server_and_its_result_reaches_the_model(
    nursery: trio.Nursery, fake_openai: tuple[FakeOpenAI, str], tmp_path: Path, http_port: int
) -> None:
    server, url = fake_openai
    server.model = _mcp_model
    tools = await _serve(nursery, McpTools(load_mcp_config(str(_config(tmp_path, http_port)))))
    client = openai.AsyncOpenAI(
        api_key="k", base_url=url, max_retries=0, http_client=openai.DefaultAsyncHttpxClient()
    )
    runtime = OpenAIRuntime(client, Profile("m", "SYS"), FileTranscriptStore(tmp_path), mcp=tools)
    task = FakeTools(task_with("t-mcp", "add things"))
    started = trio.current_time()
    with trio.fail_after(DEADLINE_S):
        await runtime.run_turn("t-mcp", wake_prompt("t-mcp"), task)
    elapsed = trio.current_time() - started
    await runtime.aclose()
    offered = [t["function"]["name"] for t in server.requests[0]["tools"]]
    assert offered[:4] == [
        "a2a_read_task",
        "a2a_complete_task",
        "a2a_record_output",
        "a2a_require_input",
    ]
    assert "calc__add" in offered and "web__add" in offered
    assert task.calls == [
        ("a2a_complete_task", "t-mcp", {"response": "5 and 15", "outcome": "completed"})
    ]
    stored = json.loads(
        (tmp_path / "agent-sessions" / session_id("t-mcp") / "transcript.json").read_text()
    )["messages"]
    calls = [c["function"]["name"] for m in stored for c in m.get("tool_calls") or ()]
    assert calls[:2] == ["calc__add", "web__add"]
    results = [m["content"] for m in stored if m["role"] == "tool"]
    assert "| 5" in results[0] and "| 15" in results[1]
    logged = (tmp_path / "calls.jsonl").read_text().splitlines()
    assert json.loads(logged[0]) == {"name": "add", "arguments": {"a": 2, "b": 3}}
    print(f"MCP turn (stdio + HTTP tool calls, 4 model calls): {elapsed * 1000:.0f} ms")


async def test_the_agent_settings_start_the_servers_with_the_openai_runtime(
    fake_openai: tuple[FakeOpenAI, str], tmp_path: Path, http_port: int
) -> None:
    server, url = fake_openai
    server.model = _mcp_model
    settings = AgentSettings(
        runtime="openai", model="m", base_url=url, mcp_config=str(_config(tmp_path, http_port))
    )
    task = FakeTools(task_with("t-set", "add things"))
    with trio.fail_after(DEADLINE_S):
        async with open_runtime(settings, tmp_path) as runtime:
            await runtime.run_turn("t-set", wake_prompt("t-set"), task)
            await runtime.aclose()
    assert task.calls[-1][2]["response"] == "5 and 15"
    assert set(server.authorizations) == {None}  # no key: no Authorization header at all


async def test_a_hung_stdio_server_is_restarted_so_the_next_call_gets_a_fresh_one(
    nursery: trio.Nursery, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    calc = {"command": sys.executable, "args": [MCP_SERVER, "stdio"]}
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"calc": calc}}))
    tools = await _serve(nursery, McpTools(load_mcp_config(str(path)), call_timeout_s=1.0))
    with trio.fail_after(DEADLINE_S):
        hung = await tools.call("calc__sleep", {})
        started = trio.current_time()
        after = await tools.call("calc__add", {"a": 1, "b": 1})
        elapsed = trio.current_time() - started
    assert hung.startswith("error: MCP server calc failed the call: no answer within 1 s")
    assert "restarted" in hung
    assert "| 2" in after and elapsed < 1.0  # a fresh server, not the hung one's timeout
    assert [
        r.server for r in caplog.records if getattr(r, "event", "") == "mcp_server_restarted"
    ] == ["calc"]


async def test_servers_that_cannot_start_are_left_out_and_never_respawned(
    nursery: trio.Nursery, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    servers = {
        "missing": {"command": "/nonexistent/binary"},
        "exits": {"command": sys.executable, "args": ["-c", "raise SystemExit(1)"]},
        "mute": {"command": sys.executable, "args": ["-c", "import sys; sys.stdin.read()"]},
    }
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    tools = await _serve(nursery, McpTools(load_mcp_config(str(path)), start_timeout_s=1.0))
    assert tools.tools == ()
    # Their supervisors are done: nothing can start them again in this process.
    assert tools.supervised == ()
    unavailable = [r for r in caplog.records if getattr(r, "event", "") == "mcp_server_unavailable"]
    assert sorted(r.server for r in unavailable) == ["exits", "missing", "mute"]
    assert await tools.call("missing__x", {}) == "error: no tool 'missing__x'"


async def test_a_crashed_stdio_server_is_said_to_have_exited(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    calc = {"command": sys.executable, "args": [MCP_SERVER, "stdio"]}
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"calc": calc}}))
    tools = await _serve(nursery, McpTools(load_mcp_config(str(path)), call_timeout_s=5.0))
    with trio.fail_after(DEADLINE_S):
        crashed = await tools.call("calc__crash", {})
    assert crashed == "error: MCP server calc failed the call: the calc exited with code 1"


async def test_an_unknown_tool_error_lists_every_tool_offered_mcp_ones_included(
    nursery: trio.Nursery, fake_openai: tuple[FakeOpenAI, str], tmp_path: Path, http_port: int
) -> None:
    server, url = fake_openai

    def model(messages: list[Body]) -> tuple[str | None, list[tuple[str, Body]]]:
        if messages[-1]["role"] == "user":
            return None, [("calc__nope", {})]
        results = [m["content"] for m in messages if m["role"] == "tool"]
        return None, [("a2a_complete_task", {"taskId": "t-unknown", "response": results[0]})]

    server.model = model
    tools = await _serve(nursery, McpTools(load_mcp_config(str(_config(tmp_path, http_port)))))
    client = openai.AsyncOpenAI(
        api_key="k", base_url=url, max_retries=0, http_client=openai.DefaultAsyncHttpxClient()
    )
    runtime = OpenAIRuntime(client, Profile("m", "SYS"), FileTranscriptStore(tmp_path), mcp=tools)
    task = FakeTools(task_with("t-unknown", "do"))
    with trio.fail_after(DEADLINE_S):
        await runtime.run_turn("t-unknown", wake_prompt("t-unknown"), task)
    await runtime.aclose()
    error = task.calls[-1][2]["response"]
    assert error.startswith("error: unknown tool 'calc__nope'; the tools are a2a_read_task, ")
    assert "calc__add" in error and "web__add" in error
