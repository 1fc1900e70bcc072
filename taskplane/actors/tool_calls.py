"""The task tools' changes as data: a closed set of tool calls and their pure effect.

The concrete toolbox (:mod:`taskplane.actors.toolbox`) validates a tool's arguments
and builds one of these records; owner(T) checks the turn's authority and applies it
with :func:`apply_tool_call`, atomically with the commit (design rule "All four tools
require the exact Task to be the active turn authority"). No trio, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol, assert_never

import attrs

from taskplane.actors import logic
from taskplane.errors import ToolError
from taskplane.extensions import ELICITATION_KEY, ELICITATION_URI, OUTFITTER_TASK_URI
from taskplane.model.enums import Role, TaskState
from taskplane.model.types import Artifact, Part, Task


class TurnAuthority(Protocol):
    """Who holds the turn's authority now (the wake actor)."""

    def holds(self, task_id: str) -> bool:
        """Whether ``task_id``'s turn is the one running now."""
        ...


@attrs.frozen
class ReadTask:
    """``a2a_read_task``: read the Task, change nothing."""


@attrs.frozen
class CompleteTask:
    """``a2a_complete_task``: record ``artifacts`` then the response, and settle.

    Attributes:
        response: the final answer (completed) or the reason (rejected).
        outcome: ``"completed"`` or ``"rejected"``.
        artifacts: validated workflow-output artifacts (completed only).
        extra_parts: parts (files, data) placed before the response text in the
            response artifact, so a client reading the first part gets them.
    """

    response: str
    outcome: Literal["completed", "rejected"]
    artifacts: tuple[Artifact, ...] = ()
    extra_parts: tuple[Part, ...] = ()


@attrs.frozen
class RecordOutput:
    """``a2a_record_output``: one workflow-output artifact; the Task keeps working."""

    artifact: Artifact


@attrs.frozen
class RequireInput:
    """``a2a_require_input``: pause on the caller with ``question``.

    Attributes:
        state: ``TASK_STATE_INPUT_REQUIRED`` or ``TASK_STATE_AUTH_REQUIRED``.
        requested_schema: an elicitation/v1 schema, emitted as a typed data part only
            if the caller's newest message activated elicitation/v1.
    """

    question: str
    state: TaskState
    requested_schema: Mapping[str, Any] | None = None


ToolCall = ReadTask | CompleteTask | RecordOutput | RequireInput
"""Every change a task tool can ask of owner(T)."""


def check_authority(task_id: str, task: Task | None, turn: TurnAuthority) -> None:
    """Raise :class:`ToolError` unless ``task_id`` holds the turn and is not terminal."""
    if not turn.holds(task_id):
        raise ToolError(f"task {task_id!r} is not authorized for the active turn")
    if task is not None and task.status.state.is_terminal:
        raise ToolError(f"task {task_id} is {task.status.state.name} and cannot change")


def apply_tool_call(call: ToolCall, task: Task, now_ms: int) -> Task:
    """The Task after ``call`` (pure). ``now_ms``: ms since the epoch."""
    match call:
        case ReadTask():
            return task
        case CompleteTask(response=response, outcome="rejected"):
            reason = logic.agent_message(task, [Part.from_text(response)])
            return logic.with_status(task, TaskState.TASK_STATE_REJECTED, now_ms, reason)
        case CompleteTask(response=response, artifacts=artifacts, extra_parts=extra):
            for artifact in artifacts:
                task = logic.with_artifact(task, _marked(task, artifact))
            response_artifact = Artifact(
                artifact_id=f"response-{task.id}",
                name="response",
                parts=(*extra, Part.from_text(response)),
            )
            task = logic.with_artifact(task, response_artifact)
            return logic.with_status(task, TaskState.TASK_STATE_COMPLETED, now_ms)
        case RecordOutput(artifact=artifact):
            return logic.with_artifact(task, _marked(task, artifact))
        case RequireInput(question=question, state=state, requested_schema=schema):
            parts = [Part.from_text(question)]
            extensions: tuple[str, ...] = ()
            if schema is not None and activated_elicitation(task):
                elicitation = {"message": question, "requestedSchema": dict(schema)}
                parts.append(Part.from_data({ELICITATION_KEY: elicitation}))
                extensions = (ELICITATION_URI,)
            ask = logic.agent_message(task, parts, extensions)
            return logic.with_status(task, state, now_ms, ask)
        case _:
            assert_never(call)


def activated_elicitation(task: Task) -> bool:
    """The newest ROLE_USER message activated elicitation/v1."""
    users = [m for m in task.history if m.role is Role.ROLE_USER]
    return bool(users) and ELICITATION_URI in users[-1].extensions


def _marked(task: Task, artifact: Artifact) -> Artifact:
    """An output artifact lists the outfitter-task/v1 URI only when the caller's newest
    message activated that extension (an extension is used only with a caller that
    activated it)."""
    users = [m for m in task.history if m.role is Role.ROLE_USER]
    if users and OUTFITTER_TASK_URI in users[-1].extensions:
        return attrs.evolve(artifact, extensions=(OUTFITTER_TASK_URI,))
    return artifact
