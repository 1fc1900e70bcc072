"""The history limit: a Task keeps its newest ``MAX_HISTORY_MESSAGES`` messages."""

from __future__ import annotations

from taskplane.actors import logic
from taskplane.model import lifecycle
from taskplane.model.enums import Role, TaskState
from taskplane.model.types import Message, Part


def _user(n: int) -> Message:
    return Message(message_id=f"m-{n}", role=Role.ROLE_USER, parts=(Part.from_text(str(n)),))


def test_history_keeps_the_newest_200_messages() -> None:
    assert lifecycle.MAX_HISTORY_MESSAGES == 200
    task = lifecycle.new_task("t-1", "c-1", _user(0), 0)
    for n in range(1, 250):
        task = logic.with_status(task, TaskState.TASK_STATE_INPUT_REQUIRED, n)
        task = lifecycle.continue_task(task, _user(n), n)
    assert len(task.history) == 200
    assert task.history[0].message_id == "m-50"
    assert task.history[-1].message_id == "m-249"
