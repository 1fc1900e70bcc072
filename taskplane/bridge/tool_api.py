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
    """The four task tools, authorized for one Task during one turn."""

    async def a2a_read_task(self, task_id: str) -> ToolResult:
        """The history inside the untrusted-content markers; details ``{"task": Task}``."""
        ...

    async def a2a_complete_task(
        self,
        task_id: str,
        response: str,
        outcome: Literal["completed", "rejected"] = "completed",
        outputs: Sequence[Mapping[str, Any]] = (),
        extra_parts: Sequence[Part] = (),
    ) -> ToolResult:
        """Record ``outputs``, then the response artifact, and complete; or reject."""
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
        """Pause the Task on the caller with ``question`` (INPUT_REQUIRED)."""
        ...
