"""The task tools' JSON Schemas come from one definition, and a JSON tool call is
checked against it the same way for every runtime."""

from __future__ import annotations

import pytest

from taskplane.bridge.tool_api import ToolResult
from taskplane.bridge.tool_calls import call_tool, check_arguments, result_json
from taskplane.bridge.tool_schemas import (
    CHANNEL_TOOLS,
    MAX_TEXT_CHARS,
    OPERATION_ID_PATTERN,
    TOOLS,
    openai_tools,
    tool_specs,
)
from taskplane.errors import ToolError
from taskplane.model.codec import encode
from tests.bridge._support import FakeTools, task_with


def test_the_agent_protocol_and_chat_completions_shapes_come_from_one_definition() -> None:
    specs = tool_specs()
    functions = openai_tools()
    assert [s["name"] for s in specs] == [
        "a2a_read_task",
        "a2a_complete_task",
        "a2a_record_output",
        "a2a_require_input",
    ]
    for spec, function in zip(specs, functions, strict=True):
        assert function == {
            "type": "function",
            "function": {
                "name": spec["name"],
                "description": spec["description"],
                "parameters": spec["inputSchema"],
            },
        }


def test_the_schemas_carry_the_tool_parameters_and_limits() -> None:
    schemas = {s["name"]: s["inputSchema"] for s in tool_specs()}
    for schema in schemas.values():
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert schema["properties"]["taskId"]["minLength"] == 1
        assert "taskId" in schema["required"]
    complete = schemas["a2a_complete_task"]
    assert complete["required"] == ["taskId", "response"]
    assert complete["properties"]["response"]["minLength"] == 1
    assert complete["properties"]["response"]["maxLength"] == MAX_TEXT_CHARS == 40_000
    assert complete["properties"]["outcome"]["enum"] == ["completed", "rejected"]
    item = complete["properties"]["outputs"]["items"]
    assert item["required"] == ["output", "value"]
    assert item["properties"]["output"]["minLength"] == 1
    assert item["properties"]["value"]["type"] == "object"
    record = schemas["a2a_record_output"]
    assert record["required"] == ["taskId", "output", "value"]
    ask = schemas["a2a_require_input"]
    assert ask["required"] == ["taskId", "question"]
    assert ask["properties"]["question"]["maxLength"] == 40_000
    assert ask["properties"]["requestedSchema"]["type"] == "object"
    assert len(TOOLS) == 4


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        ("a2a_nope", {"taskId": "t"}, "unknown tool"),
        ("a2a_read_task", ["t"], "must be a JSON object"),
        ("a2a_read_task", {}, "missing required parameter 'taskId'"),
        ("a2a_read_task", {"taskId": "t", "extra": 1}, "unknown parameter 'extra'"),
        ("a2a_complete_task", {"taskId": "t", "response": 7}, "response must be a JSON string"),
        ("a2a_record_output", {"taskId": "t", "output": "o", "value": [1]}, "JSON object"),
        ("a2a_complete_task", {"taskId": "t", "response": "r", "outputs": [1]}, "each of outputs"),
    ],
)
def test_a_malformed_call_is_refused_before_any_tool_runs(
    name: str, arguments: object, message: str
) -> None:
    with pytest.raises(ToolError, match=message):
        check_arguments(name, arguments)


async def test_call_tool_maps_json_arguments_onto_the_tools() -> None:
    tools = FakeTools(task_with("t", "hi"))
    read = await call_tool(tools, "a2a_read_task", {"taskId": "t"})
    await call_tool(
        tools, "a2a_complete_task", {"taskId": "t", "response": "no", "outcome": "rejected"}
    )
    await call_tool(tools, "a2a_record_output", {"taskId": "t", "output": "o", "value": {"n": 1}})
    await call_tool(tools, "a2a_require_input", {"taskId": "t", "question": "q?"})
    assert tools.calls == [
        ("a2a_read_task", "t", {}),
        ("a2a_complete_task", "t", {"response": "no", "outcome": "rejected"}),
        ("a2a_record_output", "t", {"output": "o", "value": {"n": 1}}),
        ("a2a_require_input", "t", {"question": "q?"}),
    ]
    assert result_json(read) == {"text": read.text, "details": {"task": encode(tools.task)}}
    plain = ToolResult("Task t is completed.", {"taskId": "t", "outcome": "completed"})
    assert result_json(plain) == {"text": plain.text, "details": dict(plain.details)}


def test_the_agent_protocol_document_shows_the_tools_array_the_host_sends() -> None:
    import json
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "agent-protocol.md").read_text()
    appendix = doc[doc.index("## Appendix") :]
    block = appendix[
        appendix.index("```json\n") + 8 : appendix.index("\n```", appendix.index("```json"))
    ]
    assert json.loads(block) == tool_specs()


def test_the_channel_tools_come_from_the_same_definition_and_only_when_asked() -> None:
    assert tool_specs() == tool_specs(channels=False)
    native = {s["name"]: s for s in tool_specs(channels=True)}
    assert list(native) == [*(t.name for t in TOOLS), "channel_read", "channel_publish"]
    assert [f["function"]["name"] for f in openai_tools(channels=True)] == list(native)
    assert native["channel_read"]["inputSchema"]["required"] == ["taskId"]
    publish = native["channel_publish"]["inputSchema"]
    assert publish["required"] == ["taskId", "operationId", "text"]
    assert publish["properties"]["operationId"]["pattern"] == OPERATION_ID_PATTERN
    assert publish["properties"]["text"]["maxLength"] == MAX_TEXT_CHARS
    assert [t.name for t in CHANNEL_TOOLS] == ["channel_read", "channel_publish"]


async def test_call_tool_maps_the_channel_tools_and_checks_their_arguments() -> None:
    tools = FakeTools(task_with("t", "hi"), channel_tools=True)
    await call_tool(tools, "channel_read", {"taskId": "t"})
    await call_tool(tools, "channel_publish", {"taskId": "t", "operationId": "p-1", "text": "x"})
    assert tools.calls == [
        ("channel_read", "t", {}),
        ("channel_publish", "t", {"operationId": "p-1", "text": "x"}),
    ]
    with pytest.raises(ToolError, match="missing required parameter 'operationId'"):
        check_arguments("channel_publish", {"taskId": "t", "text": "x"})
    with pytest.raises(ToolError, match="text must be a JSON string"):
        check_arguments("channel_publish", {"taskId": "t", "operationId": "p", "text": 1})
