"""Calling a task tool by name with JSON arguments, and its result as JSON.

Every runtime that talks to an agent in JSON (chat-completions tool calls, the
agent protocol's ``tool_call`` requests, :meth:`TurnTools.call`) goes through
:func:`call_tool`, so argument checking is the same everywhere: the names and
required parameters of the tool definitions, JSON types checked, unknown names
refused; the limits themselves are enforced by the tools.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from taskplane.bridge.tool_api import TaskTools, ToolResult
from taskplane.bridge.tool_schemas import TOOLS_BY_NAME
from taskplane.errors import ToolError
from taskplane.model.codec import encode
from taskplane.model.types import Task

_JSON_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "object": dict,
    "array": list,
}


def check_arguments(name: str, arguments: Any) -> dict[str, Any]:
    """``arguments`` checked against tool ``name``'s definition.

    Raises:
        ToolError: unknown tool, arguments not an object, a missing required or
            unknown parameter, or a value of the wrong JSON type.
    """
    tool = TOOLS_BY_NAME.get(name)
    if tool is None:
        raise ToolError(f"unknown tool {name!r}; the tools are {', '.join(TOOLS_BY_NAME)}")
    if not isinstance(arguments, dict):
        raise ToolError(f"{name}: arguments must be a JSON object")
    unknown = sorted(set(arguments) - set(tool.parameters))
    if unknown:
        raise ToolError(f"{name}: unknown parameter {unknown[0]!r}")
    missing = [p for p in tool.required if p not in arguments]
    if missing:
        raise ToolError(f"{name}: missing required parameter {missing[0]!r}")
    for key, value in arguments.items():
        expected = _JSON_TYPES.get(tool.parameters[key]["type"])
        if expected is not None and not isinstance(value, expected):
            raise ToolError(f"{name}: {key} must be a JSON {tool.parameters[key]['type']}")
    if not all(isinstance(o, dict) for o in arguments.get("outputs", ())):
        raise ToolError(f"{name}: each of outputs must be an object {{output, value}}")
    return arguments


async def call_tool(tools: TaskTools, name: str, arguments: Any) -> ToolResult:
    """Run tool ``name`` with JSON ``arguments`` against ``tools``.

    Raises:
        ToolError: the arguments are wrong (:func:`check_arguments`) or the tool
            refused the call.
    Cancellation: cancels the tool call (a change either commits whole or not at all).
    """
    args = check_arguments(name, arguments)
    task_id = args["taskId"]
    if name == "a2a_read_task":
        return await tools.a2a_read_task(task_id)
    if name == "a2a_complete_task":
        return await tools.a2a_complete_task(
            task_id,
            args["response"],
            args.get("outcome", "completed"),
            tuple(args.get("outputs", ())),
        )
    if name == "a2a_record_output":
        return await tools.a2a_record_output(task_id, args["output"], args["value"])
    if name == "channel_read":
        return await tools.channel_read(task_id)
    if name == "channel_publish":
        return await tools.channel_publish(task_id, args["operationId"], args["text"])
    return await tools.a2a_require_input(task_id, args["question"], args.get("requestedSchema"))


def result_json(result: ToolResult) -> dict[str, Any]:
    """``{"text", "details"}`` with every Task in ``details`` as its A2A JSON."""
    return {"text": result.text, "details": _jsonable(result.details)}


def _jsonable(value: Any) -> Any:
    if isinstance(value, Task):
        return encode(value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value
