"""Pure rules of a Task's life that intake and the store share: creation, continuation,
and whether a Task waits for a reply.

No I/O: the store's acceptance applies these inside its transaction, and the per-task
owner's decisions (``taskplane.actors.logic``) build on them.
"""

from __future__ import annotations

from datetime import UTC, datetime

import attrs

from taskplane.errors import InvalidRequest, UnsupportedOperation
from taskplane.model.enums import Role, TaskState
from taskplane.model.types import Message, Task, TaskStatus

MAX_HISTORY_MESSAGES = 200
"""History kept per Task; older messages are dropped first."""


def timestamp(now_ms: int) -> datetime:
    """``now_ms`` (ms since the epoch) as an aware UTC datetime at ms precision."""
    return datetime.fromtimestamp(now_ms / 1000, UTC).replace(microsecond=(now_ms % 1000) * 1000)


def append_history(task: Task, message: Message) -> tuple[Message, ...]:
    """``task``'s history with ``message`` appended, the newest ``MAX_HISTORY_MESSAGES``."""
    history = (*task.history, message)
    return history[-MAX_HISTORY_MESSAGES:]


def new_task(task_id: str, context_id: str, message: Message, now_ms: int) -> Task:
    """A SUBMITTED Task whose history is the caller's ``message`` (IDs filled in)."""
    message = attrs.evolve(message, task_id=task_id, context_id=context_id)
    return Task(
        id=task_id,
        context_id=context_id,
        status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED, timestamp=timestamp(now_ms)),
        history=(message,),
    )


def continue_task(task: Task, message: Message, now_ms: int) -> Task:
    """``task`` continued by the caller's ``message``: appended, back to SUBMITTED.

    Raises:
        UnsupportedOperation: the Task is terminal.
        InvalidRequest: the Task is not waiting for input (SUBMITTED or WORKING):
            a running turn cannot be claimed again.
    """
    state = task.status.state
    if state.is_terminal:
        raise UnsupportedOperation(
            f"task {task.id} is in the terminal state {state.name} and accepts no messages",
            metadata={"taskId": task.id, "state": state.name},
        )
    if not state.is_interrupted:
        raise InvalidRequest(
            f"task {task.id} is {state.name}, not waiting for input; wait for it to ask "
            "(INPUT_REQUIRED or AUTH_REQUIRED) or send a new message without taskId",
            metadata={"taskId": task.id, "state": state.name},
        )
    message = attrs.evolve(message, task_id=task.id, context_id=task.context_id)
    return attrs.evolve(
        task,
        history=append_history(task, message),
        status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED, timestamp=timestamp(now_ms)),
    )


def awaits_reply(task: Task) -> bool:
    """Conditions 1 and 6 of a verified reply anchor: INPUT_REQUIRED/AUTH_REQUIRED with
    an unanswered request (the status message is the newest history entry; no caller
    message came after it)."""
    status = task.status
    if not status.state.is_interrupted or status.message is None or not task.history:
        return False
    newest = task.history[-1]
    return newest.role is Role.ROLE_AGENT and newest.message_id == status.message.message_id
