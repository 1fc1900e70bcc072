"""Pure Task transitions: ``Task -> Task`` functions and the events a change emits.

No trio and no I/O here, so the decisions are tested without an event loop: the
per-task owner applies these functions, commits the result, then fans
the events out. Each refusal raises the A2A error a caller should see. Creation and
continuation live in :mod:`taskplane.model.lifecycle` (the store applies them).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence

import attrs

from taskplane.errors import TaskNotCancelable, UnsupportedOperation
from taskplane.model.codec import encode
from taskplane.model.enums import Role, TaskState
from taskplane.model.lifecycle import append_history, timestamp
from taskplane.model.types import (
    Artifact,
    Message,
    Part,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskStatus,
    TaskStatusUpdateEvent,
)


def new_id() -> str:
    """A fresh server-minted identifier (UUID4 text)."""
    return str(uuid.uuid4())


def activation_digest(message: Message, activated_extensions: Sequence[str]) -> str:
    """``"sha256:<hex>"`` over what identifies a send's payload.

    Covers role, parts, activated extensions, referenceTaskIds and the client-supplied
    taskId/contextId; excludes messageId (the dedupe key itself), metadata, and every
    ID the server mints (design rule "Idempotency is mandatory").
    """
    body = encode(message)
    material = {
        "role": body.get("role"),
        "parts": body.get("parts"),
        "extensions": list(activated_extensions),
        "referenceTaskIds": body.get("referenceTaskIds", []),
        "taskId": body.get("taskId"),
        "contextId": body.get("contextId"),
    }
    raw = json.dumps(material, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def agent_message(task: Task, parts: Sequence[Part], extensions: Sequence[str] = ()) -> Message:
    """A ``ROLE_AGENT`` message in ``task``'s context."""
    return Message(
        message_id=new_id(),
        role=Role.ROLE_AGENT,
        parts=tuple(parts),
        context_id=task.context_id,
        task_id=task.id,
        extensions=tuple(extensions),
    )


def with_status(task: Task, state: TaskState, now_ms: int, message: Message | None = None) -> Task:
    """``task`` moved to ``state`` (the status message, if any, also joins history).

    Raises:
        UnsupportedOperation: the Task is already terminal (terminal never changes).
    """
    _refuse_terminal(task)
    history = append_history(task, message) if message is not None else task.history
    return attrs.evolve(
        task,
        status=TaskStatus(state=state, message=message, timestamp=timestamp(now_ms)),
        history=history,
    )


def canceled(task: Task, now_ms: int) -> Task:
    """``task`` moved to CANCELED.

    Raises:
        TaskNotCancelable: the Task is terminal, CANCELED included.
    """
    if task.status.state.is_terminal:
        raise TaskNotCancelable(
            f"task {task.id} is already {task.status.state.name}",
            metadata={"taskId": task.id, "state": task.status.state.name},
        )
    return attrs.evolve(
        task, status=TaskStatus(state=TaskState.TASK_STATE_CANCELED, timestamp=timestamp(now_ms))
    )


def with_artifact(task: Task, artifact: Artifact) -> Task:
    """``task`` with ``artifact`` added, or replacing the one with the same artifactId.

    Raises:
        UnsupportedOperation: the Task is terminal.
    """
    _refuse_terminal(task)
    others = tuple(a for a in task.artifacts if a.artifact_id != artifact.artifact_id)
    if len(others) == len(task.artifacts):
        return attrs.evolve(task, artifacts=(*task.artifacts, artifact))
    merged = tuple(artifact if a.artifact_id == artifact.artifact_id else a for a in task.artifacts)
    return attrs.evolve(task, artifacts=merged)


def _refuse_terminal(task: Task) -> None:
    if task.status.state.is_terminal:
        raise UnsupportedOperation(
            f"task {task.id} is {task.status.state.name}; a terminal task never changes",
            metadata={"taskId": task.id},
        )


def context_of(task: Task) -> str:
    """The contextId of a server-held Task (always set by this server)."""
    if task.context_id is None:
        raise ValueError(f"task {task.id} has no contextId")
    return task.context_id


def events(old: Task, new: Task) -> list[StreamResponse]:
    """The StreamResponse frames that tell a subscriber how ``old`` became ``new``.

    Artifacts first (an artifact recorded with a completion is visible before the
    terminal status that ends the stream), then the status if it changed.
    """
    out: list[StreamResponse] = []
    before = {a.artifact_id: a for a in old.artifacts}
    for artifact in new.artifacts:
        if before.get(artifact.artifact_id) != artifact:
            out.append(
                StreamResponse(
                    artifact_update=TaskArtifactUpdateEvent(
                        task_id=new.id,
                        context_id=context_of(new),
                        artifact=artifact,
                        last_chunk=True,
                    )
                )
            )
    if old.status != new.status:
        out.append(
            StreamResponse(
                status_update=TaskStatusUpdateEvent(
                    task_id=new.id, context_id=context_of(new), status=new.status
                )
            )
        )
    return out


def for_caller(
    task: Task, *, history_length: int | None = None, include_artifacts: bool = True
) -> Task:
    """``task`` as a caller asked to see it.

    Args:
        history_length: ``None``: all history; ``0``: none; ``n``: the newest ``n``.
        include_artifacts: ``False`` drops the artifacts (ListTasks default).
    """
    if history_length is not None:
        history = task.history[-history_length:] if history_length > 0 else ()
        task = attrs.evolve(task, history=history)
    if not include_artifacts:
        task = attrs.evolve(task, artifacts=())
    return task
