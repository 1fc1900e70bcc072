"""The task tools as an agent runtime sees them: :class:`TaskTools` and :class:`ToolResult`.

A runtime is written against this protocol only; the concrete toolbox bound to one
Task for one turn is built by the wake queue ("All four tools require the exact Task
to be the active turn authority"). Every method raises
:class:`~taskplane.errors.ToolError` when the call is refused (no authority, terminal
Task, invalid arguments); nothing is recorded then.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

import attrs

from taskplane.model.types import Part


@attrs.frozen
class ToolResult:
    """What a tool returns to the agent: display text plus structured details."""

    text: str
    details: Mapping[str, Any]


class TaskTools(Protocol):
    """The four task tools for one Task, valid while that Task holds the turn.

    Every tool raises :class:`~taskplane.errors.ToolError` (the agent sees it as a
    tool error) when the Task is not the active turn authority, is terminal, or an
    argument is invalid; nothing is recorded then. Store and actor failures
    (``StoreUnavailable``, ``ActorGone``, ``Overloaded``) propagate and fail the turn.
    Cancellation: cancelling a call after the change was handed to owner(T) does not
    undo it; the change may still commit.
    """

    task_id: str

    async def a2a_read_task(self, task_id: str) -> ToolResult:
        """The Task's history inside untrusted-content markers; details: ``{"task"}``."""
        ...

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
            response: the answer (completed) or the reason (rejected), 1..40,000 chars.
            outputs: ``[{output, value}]`` declared workflow outputs (completed only).
            extra_parts: parts (files, data) placed before the response text.
        """
        ...

    async def a2a_record_output(self, task_id: str, output: str, value: Any) -> ToolResult:
        """Record one declared workflow output while the Task keeps working."""
        ...

    async def a2a_require_input(
        self,
        task_id: str,
        question: str,
        requested_schema: Mapping[str, Any] | None = None,
        kind: Literal["input", "auth"] = "input",
    ) -> ToolResult:
        """Pause the Task on the caller: INPUT_REQUIRED (or AUTH_REQUIRED) with ``question``."""
        ...
