"""The concrete task tools: one Task, one turn, every change through owner(T).

Implements :class:`taskplane.bridge.tools.TaskTools`. Arguments are validated here,
before anything is sent; the change itself is a :data:`~taskplane.actors.tool_calls.ToolCall`
record that owner(T) checks against the turn's authority and applies atomically with
its commit (design rule "All four tools require the exact Task to be the active turn
authority").
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from taskplane.actors.channels import NativeChannel
from taskplane.actors.outbound import DeliveryAmbiguous, DeliveryConflict, DeliveryFailed
from taskplane.actors.owner_client import OwnerClient
from taskplane.actors.tool_calls import (
    CompleteTask,
    ReadTask,
    RecordOutput,
    RequireInput,
    ToolCall,
    TurnAuthority,
    check_authority,
)
from taskplane.bridge.elicitation import validate_requested_schema
from taskplane.bridge.manifest import WorkflowOutputs
from taskplane.bridge.tool_api import ToolResult
from taskplane.bridge.tool_schemas import OPERATION_ID_PATTERN
from taskplane.bridge.tools import render_history, render_native_item, require_object, require_text
from taskplane.errors import ToolError
from taskplane.extensions import OUTFITTER_TASK_KEY
from taskplane.model.enums import TaskState
from taskplane.model.types import Artifact, Part, Task
from taskplane.store.records import Fence

_OPERATION_ID = re.compile(OPERATION_ID_PATTERN)


class TaskToolbox:
    """The task tools for one Task, valid while it holds the turn's authority.

    Args:
        task_id: the Task this toolbox is bound to.
        owners: the typed client of the per-task owners.
        turn: who holds the turn's authority (the wake actor).
        outputs: declared workflow outputs (``A2A_WORKFLOW_MANIFEST``).
        can_continue: whether the Task's source has a continuation method (A2A, and
            native sources with reply anchors).
        channel: the native channel of the Task's source (``None``: an A2A Task, or
            its source is not running); with one the channel tools are offered.
        fence: the turn's wake lease on a store shared by several nodes (each tool's
            write checks it); ``None`` on one node.
    Raises (every tool):
        ToolError: not the active authority, terminal Task, or invalid arguments.
        Fenced: the turn's lease moved to another node; nothing was recorded.
    """

    def __init__(
        self,
        task_id: str,
        owners: OwnerClient,
        turn: TurnAuthority,
        outputs: WorkflowOutputs,
        *,
        can_continue: bool = True,
        channel: NativeChannel | None = None,
        fence: Fence | None = None,
    ) -> None:
        self.task_id = task_id
        self.fence = fence
        self.channel_tools = channel is not None
        self._channel = channel
        self._owners = owners
        self._turn = turn
        self._outputs = outputs
        self._can_continue = can_continue
        self.last_seen: Task | None = None

    @property
    def settled_terminal(self) -> Task | None:
        """The Task as a tool call of this turn left it, if that was terminal.

        A terminal Task never changes again (A2A terminal states are final), so the
        wake actor needs no fresh snapshot of it after the turn. ``None``: no tool call
        yet, or the Task was still live after the last one.
        """
        seen = self.last_seen
        return seen if seen is not None and seen.status.state.is_terminal else None

    async def _apply(self, task_id: Any, call: ToolCall) -> Task:
        if task_id != self.task_id:
            raise ToolError(f"task {task_id!r} is not authorized for the active turn")
        check_authority(self.task_id, None, self._turn)
        task = await self._owners.apply_tool_call(self.task_id, call, self._turn, self.fence)
        self.last_seen = task
        return task

    async def a2a_read_task(self, task_id: str) -> ToolResult:
        """The Task's history rendered inside untrusted markers; details = the Task."""
        task = await self._apply(task_id, ReadTask())
        return ToolResult(render_history(task), {"task": task})

    def _output_artifact(self, task_id: str, output: Any, value: Any) -> Artifact:
        name = require_text("output", output)
        kind = self._outputs.type_of(name)
        if not self._outputs.outputs:
            raise ToolError(
                "no workflow outputs are declared; set A2A_WORKFLOW_MANIFEST to record outputs"
            )
        if kind is None:
            raise ToolError(
                f"output {name!r} is not declared by workflow {self._outputs.workflow_id!r}"
            )
        value = require_object("value", value)
        return Artifact(
            artifact_id=f"output-{name}-{task_id}",
            name=name,
            parts=(Part.from_data(value),),
            metadata={OUTFITTER_TASK_KEY: {"output": name, "type": kind, "value": value}},
        )

    async def a2a_complete_task(
        self,
        task_id: str,
        response: str,
        outcome: Literal["completed", "rejected"] = "completed",
        outputs: Sequence[Mapping[str, Any]] = (),
        extra_parts: Sequence[Part] = (),
    ) -> ToolResult:
        """Record ``outputs`` then the response artifact and complete, or reject.

        Args:
            response: the final answer (completed) or the reason (rejected), 1..40,000 chars.
            outputs: ``[{output, value}]`` declared workflow outputs (completed only).
            extra_parts: parts (files, data) placed before the response text in the
                response artifact; used by the scripted runtime's TCK behaviours.
        """
        response = require_text("response", response)
        if outcome not in ("completed", "rejected"):
            raise ToolError('outcome must be "completed" or "rejected"')
        if outcome == "rejected" and (outputs or extra_parts):
            raise ToolError("outputs cannot be recorded on a rejected task")
        names = [o.get("output") for o in outputs]
        if len(set(map(str, names))) != len(names):
            raise ToolError("each output may be recorded once per completion")
        artifacts = tuple(
            self._output_artifact(task_id, o.get("output"), o.get("value")) for o in outputs
        )
        await self._apply(task_id, CompleteTask(response, outcome, artifacts, tuple(extra_parts)))
        return ToolResult(f"Task {task_id} is {outcome}.", {"taskId": task_id, "outcome": outcome})

    async def a2a_record_output(self, task_id: str, output: str, value: Any) -> ToolResult:
        """Record one declared workflow output while the Task keeps working."""
        artifact = self._output_artifact(task_id, output, value)
        await self._apply(task_id, RecordOutput(artifact))
        return ToolResult(
            f"Task {task_id} recorded output {output!r}.", {"taskId": task_id, "output": output}
        )

    async def a2a_require_input(
        self,
        task_id: str,
        question: str,
        requested_schema: Mapping[str, Any] | None = None,
        kind: Literal["input", "auth"] = "input",
    ) -> ToolResult:
        """Pause the Task on the caller: INPUT_REQUIRED (or AUTH_REQUIRED) with ``question``.

        Args:
            requested_schema: optional elicitation/v1 schema; emitted as a typed data
                part only if the caller's latest message activated elicitation/v1.
            kind: ``"auth"`` pauses in AUTH_REQUIRED instead.
        """
        question = require_text("question", question)
        if requested_schema is not None:
            validate_requested_schema(requested_schema)
        if kind not in ("input", "auth"):
            raise ToolError('kind must be "input" or "auth"')
        if not self._can_continue:
            raise ToolError(
                f"task {task_id} has no continuation method; complete or reject it instead"
            )
        state = (
            TaskState.TASK_STATE_INPUT_REQUIRED
            if kind == "input"
            else TaskState.TASK_STATE_AUTH_REQUIRED
        )
        await self._apply(task_id, RequireInput(question, state, requested_schema))
        return ToolResult(
            f"Task {task_id} paused on the caller's answer.",
            {"taskId": task_id, "state": state.name},
        )

    def _native(self, task_id: Any) -> NativeChannel:
        if self._channel is None:
            raise ToolError(f"task {task_id!r} is not a native task: it has no channel tools")
        return self._channel

    async def channel_read(self, task_id: str) -> ToolResult:
        """The exact provider item the native Task came from, inside untrusted markers;
        details: ``{"source", "locator"}``."""
        channel = self._native(task_id)
        task = await self._apply(task_id, ReadTask())
        item = await channel.read(task)
        details = {"source": item.source, "locator": dict(item.locator)}
        return ToolResult(render_native_item(item.source, item.locator, item.parts), details)

    async def channel_publish(self, task_id: str, operation_id: str, text: str) -> ToolResult:
        """Post ``text`` to the exact provider item, once per ``operation_id``; details:
        ``{"deliveryId", "providerResponseId"}``. See
        :meth:`~taskplane.bridge.tool_api.TaskTools.channel_publish`."""
        channel = self._native(task_id)
        if not isinstance(operation_id, str) or not _OPERATION_ID.match(operation_id):
            raise ToolError(f"operationId must match {OPERATION_ID_PATTERN}")
        text = require_text("text", text)
        task = await self._apply(task_id, ReadTask())
        if task.status.state.is_terminal:
            raise ToolError(f"task {task_id} is {task.status.state.name}: nothing more is posted")
        try:
            published = await channel.publish(task, operation_id, text)
        except DeliveryAmbiguous as exc:
            raise ToolError(
                f"the outcome of publication {operation_id!r} is unknown; it is not sent "
                f"again automatically ({exc})"
            ) from exc
        except DeliveryConflict as exc:
            raise ToolError(
                f"operationId {operation_id!r} was already published with other text"
            ) from exc
        except DeliveryFailed as exc:
            raise ToolError(
                f"publication {operation_id!r} was not delivered ({exc}); call again with the "
                "same operationId"
            ) from exc
        return ToolResult(
            f"Published {operation_id!r} as {published.provider_response_id}.",
            {
                "deliveryId": published.delivery_id,
                "providerResponseId": published.provider_response_id,
            },
        )
