"""The ``python`` agent example of ``docs/writing-an-agent.md`` runs as printed, on a
text message and on a data-only message (no text part), with the names it imports
from the documented place."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import trio

from taskplane.bridge.python_runtime import Message, Part, Task, TurnTools
from taskplane.model.enums import Role
from tests.bridge._support import FakeTools, task_with

DOC = Path(__file__).resolve().parents[2] / "docs" / "writing-an-agent.md"


def _example() -> Any:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## 3c.", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    namespace: dict[str, Any] = {}
    exec(compile(code.group(1), str(DOC), "exec"), namespace)  # the documented code
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


async def _run(task: Task) -> FakeTools:
    tools = FakeTools(task)
    turn = TurnTools(task.id, "task-x", Path("/nonexistent"), tools)
    with trio.fail_after(5):
        await _example()("prompt", turn)
    return tools


async def test_the_documented_python_agent_answers_a_text_message() -> None:
    tools = await _run(task_with("t-doc", "hello there"))
    assert tools.calls[-1][2]["response"] == "You said: hello there"


async def test_the_documented_python_agent_answers_a_data_only_message() -> None:
    tools = await _run(_data_only("t-data"))
    assert tools.calls[-1][2]["response"] == "You said: (no text)"
