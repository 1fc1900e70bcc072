"""The ``openai`` runtime against a scripted OpenAI-compatible server on a loopback port,
with an in-memory toolbox: the tool-calling loop, durable transcripts reopened with
their model profile, provider errors as turn failures, cancellation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
import trio

from taskplane.bridge.openai_runtime import (
    DEFAULT_SYSTEM_PROMPT,
    UNKNOWN_OUTCOME,
    OpenAIRuntime,
    ProviderError,
    complete_tool_results,
)
from taskplane.bridge.runtime import session_id, wake_prompt
from taskplane.bridge.sessions import FileTranscriptStore, Profile
from taskplane.bridge.tool_schemas import openai_tools
from taskplane.bridge.tools import UNTRUSTED_BEGIN, UNTRUSTED_END
from taskplane.errors import ProviderUnavailable
from tests.bridge._support import INJECTION, FakeTools, task_with
from tests.bridge.fake_openai import FakeOpenAI

TURN_DEADLINE_S = 20.0


def _runtime(url: str, root: Path, model: str = "test-model", prompt: str = "SYS") -> OpenAIRuntime:
    client = openai.AsyncOpenAI(
        api_key="sk-test", base_url=url, max_retries=0, http_client=openai.DefaultAsyncHttpxClient()
    )
    return OpenAIRuntime(client, Profile(model, prompt), FileTranscriptStore(root))


async def _turn(runtime: OpenAIRuntime, tools: FakeTools) -> None:
    with trio.fail_after(TURN_DEADLINE_S):
        await runtime.run_turn(tools.task.id, wake_prompt(tools.task.id), tools)


async def test_a_turn_reads_then_completes_and_sends_the_tools_as_functions(
    fake_openai: tuple[FakeOpenAI, str], tmp_path: Path
) -> None:
    server, url = fake_openai
    runtime = _runtime(url, tmp_path)
    tools = FakeTools(task_with("t-1", "Hello, model"))
    await _turn(runtime, tools)
    await runtime.aclose()
    assert [c[0] for c in tools.calls] == ["a2a_read_task", "a2a_complete_task"]
    assert tools.calls[-1][2]["response"] == "Hello, model"
    assert len(server.requests) == 3  # read, complete, final answer
    first = server.requests[0]
    assert first["model"] == "test-model"
    assert first["tools"] == openai_tools()
    assert first["messages"] == [
        {"role": "system", "content": "SYS"},
        {"role": "user", "content": wake_prompt("t-1")},
    ]


async def test_the_transcript_is_durable_and_reopened_with_its_model_profile(
    fake_openai: tuple[FakeOpenAI, str], tmp_path: Path
) -> None:
    server, url = fake_openai
    first = _runtime(url, tmp_path, model="model-a", prompt="prompt A")
    await _turn(first, FakeTools(task_with("t-2", "ask: Which branch?")))
    await first.aclose()
    stored = json.loads(
        (tmp_path / "agent-sessions" / session_id("t-2") / "transcript.json").read_text()
    )
    assert stored["profile"] == {"model": "model-a", "systemPrompt": "prompt A"}
    earlier = stored["messages"]
    assert [m["role"] for m in earlier] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]

    # A new runtime (a restart) with another profile: the session keeps its own.
    second = _runtime(url, tmp_path, model="model-b", prompt="prompt B")
    answered = FakeTools(task_with("t-2", "ask: Which branch?", "Which branch?", "main"))
    server.requests.clear()
    await _turn(second, answered)
    await second.aclose()
    assert answered.calls[-1][2]["response"] == "You answered: main"
    request = server.requests[0]
    assert request["model"] == "model-a"
    assert request["messages"][0] == {"role": "system", "content": "prompt A"}
    assert request["messages"][1 : 1 + len(earlier)] == earlier
    assert request["messages"][1 + len(earlier)] == {"role": "user", "content": wake_prompt("t-2")}


@pytest.mark.parametrize("status", [429, 500])
async def test_a_provider_error_fails_the_turn(
    fake_openai: tuple[FakeOpenAI, str], tmp_path: Path, status: int
) -> None:
    # A rate limit or an outage is the provider being unavailable (the wake pauses,
    # tests/bridge/test_provider_outage.py); a 400 is an error of the request.
    server, url = fake_openai
    runtime = _runtime(url, tmp_path)
    server.failures = [400]
    with pytest.raises(ProviderError, match="HTTP 400"):
        await _turn(runtime, FakeTools(task_with("t-3", "hello")))
    server.requests.clear()
    server.failures = [status]
    with pytest.raises(ProviderUnavailable, match=f"HTTP {status}"):
        await _turn(runtime, FakeTools(task_with("t-3", "hello")))
    assert len(server.requests) == 1  # the client's own retries are off
    # The next attempt (the wake queue's retry) continues the same session.
    tools = FakeTools(task_with("t-3", "hello"))
    await _turn(runtime, tools)
    await runtime.aclose()
    assert tools.calls[-1][2]["response"] == "hello"


async def test_an_html_page_answered_200_is_a_provider_error_naming_its_content_type(
    fake_openai: tuple[FakeOpenAI, str], tmp_path: Path
) -> None:
    # A proxy's page at a wrong base URL: configuration, not a passing outage.
    server, url = fake_openai
    server.html_page = True
    runtime = _runtime(url, tmp_path)
    with pytest.raises(ProviderError, match="content type 'text/html; charset=utf-8'") as caught:
        await _turn(runtime, FakeTools(task_with("t-html", "hello")))
    await runtime.aclose()
    assert not isinstance(caught.value, ProviderUnavailable)
    assert "OPENAI_BASE_URL" in str(caught.value)


async def test_a_provider_error_never_carries_the_api_key(
    fake_openai: tuple[FakeOpenAI, str], tmp_path: Path
) -> None:
    server, url = fake_openai
    runtime = _runtime(url, tmp_path)
    server.failures = [401]
    with pytest.raises(ProviderError, match="HTTP 401") as failure:
        await _turn(runtime, FakeTools(task_with("t-key", "hello")))
    await runtime.aclose()
    assert "sk-test" not in str(failure.value)
    assert "Incorrect API key provided: <redacted>" in str(failure.value)


async def test_an_unreachable_endpoint_fails_the_turn(tmp_path: Path) -> None:
    runtime = _runtime("http://127.0.0.1:9/v1", tmp_path)
    with pytest.raises(ProviderUnavailable, match="could not be reached"):
        await _turn(runtime, FakeTools(task_with("t-4", "hello")))
    await runtime.aclose()


async def test_a_hung_completion_is_cancellable_and_the_transcript_stays_consistent(
    fake_openai: tuple[FakeOpenAI, str], tmp_path: Path
) -> None:
    server, url = fake_openai
    runtime = _runtime(url, tmp_path)
    server.hang = True
    with trio.move_on_after(0.5) as scope:
        await runtime.run_turn("t-5", wake_prompt("t-5"), FakeTools(task_with("t-5", "hi")))
    assert scope.cancelled_caught
    server.hang = False
    tools = FakeTools(task_with("t-5", "hi"))
    await _turn(runtime, tools)
    await runtime.aclose()
    assert tools.calls[-1][2]["response"] == "hi"


async def test_several_turns_of_different_tasks_run_at_once(
    fake_openai: tuple[FakeOpenAI, str], tmp_path: Path
) -> None:
    server, url = fake_openai
    runtime = _runtime(url, tmp_path)
    server.barrier = 4  # the first model call of each turn waits for the other three
    all_tools = [FakeTools(task_with(f"t-c{i}", f"text {i}")) for i in range(4)]
    async with trio.open_nursery() as nursery:
        for tools in all_tools:
            nursery.start_soon(_turn, runtime, tools)
    await runtime.aclose()
    for i, tools in enumerate(all_tools):
        assert tools.calls[-1][2]["response"] == f"text {i}"
    assert server.max_in_flight == 4


async def test_caller_text_reaches_the_model_only_inside_the_untrusted_markers(
    fake_openai: tuple[FakeOpenAI, str], tmp_path: Path
) -> None:
    server, url = fake_openai
    runtime = _runtime(url, tmp_path, prompt=DEFAULT_SYSTEM_PROMPT)
    await _turn(runtime, FakeTools(task_with("t-inj", INJECTION)))
    await runtime.aclose()
    fragments = INJECTION.splitlines()
    for request in server.requests:
        for message in request["messages"]:
            content = message.get("content") or ""
            if message["role"] != "tool":
                assert not any(f in content for f in fragments), message
                continue
            if "Ignore all previous" not in content:
                continue
            lines = content.splitlines()
            # The real markers appear once each; the caller's fake ones are quoted data.
            assert lines.count(UNTRUSTED_BEGIN) == 1 and lines.count(UNTRUSTED_END) == 1
            inside = lines[lines.index(UNTRUSTED_BEGIN) + 1 : lines.index(UNTRUSTED_END)]
            outside = (
                lines[: lines.index(UNTRUSTED_BEGIN)] + lines[lines.index(UNTRUSTED_END) + 1 :]
            )
            assert all(f"| {f}" in inside for f in fragments)
            assert not any(f in line for f in fragments for line in outside)


async def test_a_turn_cancelled_during_a_tool_call_leaves_a_transcript_the_next_turn_can_send(
    fake_openai: tuple[FakeOpenAI, str], tmp_path: Path
) -> None:
    server, url = fake_openai
    runtime = _runtime(url, tmp_path)

    class Stuck(FakeTools):
        async def a2a_complete_task(self, *args: Any, **kwargs: Any) -> Any:
            await trio.sleep_forever()

    stuck = Stuck(task_with("t-6", "hi"))
    with trio.move_on_after(0.5) as scope:
        await runtime.run_turn("t-6", wake_prompt("t-6"), stuck)
    assert scope.cancelled_caught
    stored = json.loads(
        (tmp_path / "agent-sessions" / session_id("t-6") / "transcript.json").read_text()
    )
    assert stored["messages"][-1]["tool_calls"][0]["function"]["name"] == "a2a_complete_task"

    server.requests.clear()
    tools = FakeTools(task_with("t-6", "hi"))
    await _turn(runtime, tools)
    await runtime.aclose()
    sent = server.requests[0]["messages"]
    call_id = stored["messages"][-1]["tool_calls"][0]["id"]
    assert {"role": "tool", "tool_call_id": call_id, "content": UNKNOWN_OUTCOME} in sent
    assert tools.calls[-1][2]["response"] == "hi"


def test_complete_tool_results_adds_only_the_missing_results() -> None:
    calls = [
        {"id": i, "type": "function", "function": {"name": "x", "arguments": "{}"}} for i in "ab"
    ]
    messages = [
        {"role": "user", "content": "wake"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "a", "content": "ok"},
        {"role": "user", "content": "wake again"},
    ]
    assert complete_tool_results(messages) == [
        *messages[:3],
        {"role": "tool", "tool_call_id": "b", "content": UNKNOWN_OUTCOME},
        messages[3],
    ]
    assert complete_tool_results(messages[:2])[2:] == [
        {"role": "tool", "tool_call_id": i, "content": UNKNOWN_OUTCOME} for i in "ab"
    ]
    done = [*messages[:3], {"role": "tool", "tool_call_id": "b", "content": "ok"}]
    assert complete_tool_results(done) == done


async def test_a_native_tasks_turn_offers_the_channel_tools_as_functions(
    fake_openai: tuple[FakeOpenAI, str], tmp_path: Path
) -> None:
    server, url = fake_openai
    runtime = _runtime(url, tmp_path)
    tools = FakeTools(task_with("t-native", "Hello, model"), channel_tools=True)
    await _turn(runtime, tools)
    await runtime.aclose()
    assert server.requests[0]["tools"] == openai_tools(channels=True)
    names = [t["function"]["name"] for t in server.requests[0]["tools"]]
    assert names[-2:] == ["channel_read", "channel_publish"]
