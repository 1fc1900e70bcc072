"""The ``python`` agent examples of ``docs/writing-an-agent.md`` run as printed, on a
text message and on a data-only message (no text part), with the names it imports
from the documented place."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import trio

from taskplane.bridge.python_runtime import DataValue, Message, Part, Task, TurnTools
from taskplane.model.enums import Role
from tests.bridge._support import FakeTools, task_with

DOC = Path(__file__).resolve().parents[2] / "docs" / "writing-an-agent.md"


def _example(index: int = 0) -> Any:
    """The ``agent`` of the ``index``-th Python block of section 3c."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## 3c.", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    namespace: dict[str, Any] = {}
    exec(compile(blocks[index], str(DOC), "exec"), namespace)  # the documented code
    return namespace["agent"]


def _data_only(task_id: str) -> Task:
    task = task_with(task_id, "unused")
    message = Message(
        message_id="m-data",
        role=Role.ROLE_USER,
        parts=(Part.from_data({"order": 42}),),
        task_id=task_id,
        context_id="ctx",
    )
    return Task(id=task.id, context_id="ctx", status=task.status, history=(message,))


async def _run(task: Task, example: int = 0) -> FakeTools:
    tools = FakeTools(task)
    turn = TurnTools(task.id, "task-x", Path("/nonexistent"), tools)
    with trio.fail_after(5):
        await _example(example)("prompt", turn)
    return tools


async def test_the_documented_python_agent_answers_a_text_message() -> None:
    tools = await _run(task_with("t-doc", "hello there"))
    assert tools.calls[-1][2]["response"] == "You said: hello there"


async def test_the_documented_python_agent_answers_a_data_only_message() -> None:
    tools = await _run(_data_only("t-data"))
    assert tools.calls[-1][2]["response"] == "You said: (no text)"


async def test_the_documented_data_part_example_serialises_data_parts() -> None:
    task = _data_only("t-data2")
    assert isinstance(task.history[-1].parts[0].data, DataValue)
    tools = await _run(task, example=1)
    assert tools.calls[-1][2]["response"] == 'You sent: {"order": 42}'
    tools = await _run(task_with("t-text2", "hi"), example=1)
    assert tools.calls[-1][2]["response"] == "You sent: hi"
