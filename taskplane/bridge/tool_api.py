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


class TurnLease(Protocol):
    """The lease a turn runs under on a store shared by several nodes (design rule
    "Turn authority is a lease"): the turn of wake ``activation_id`` belongs to
    ``node_id`` while the lease of epoch ``epoch`` is current. A runtime never reads
    it; it hands it to the durable writes it makes for the turn (the ``openai``
    runtime's transcript saves), which are refused once the lease moved."""

    @property
    def activation_id(self) -> str: ...

    @property
    def epoch(self) -> int: ...

    @property
    def node_id(self) -> str: ...


@attrs.frozen
class ToolResult:
    """What a tool returns to the agent: display text plus structured details."""

    text: str
    details: Mapping[str, Any]


class TaskTools(Protocol):
    """The task tools for one Task, valid while that Task holds the turn: the four
    ``a2a_*`` tools, and for a native Task (``channel_tools``) the two channel tools.

    Every tool raises :class:`~taskplane.errors.ToolError` (the agent sees it as a
    tool error) when the Task is not the active turn authority, is terminal, or an
    argument is invalid; nothing is recorded then. Store and actor failures
    (``StoreUnavailable``, ``ActorGone``, ``Overloaded``) propagate and fail the turn.
    Cancellation: cancelling a call after the change was handed to owner(T) does not
    undo it; the change may still commit.
    """

    task_id: str
    channel_tools: bool
    """The Task is native and its source runs: ``channel_read`` and
    ``channel_publish`` are offered (an A2A Task's calls of them are refused)."""

    @property
    def fence(self) -> TurnLease | None:
        """The turn's lease on a store shared by several nodes (``None``: one node,
        no lease); a runtime's own durable writes of the turn are made under it."""
        ...

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

    async def channel_read(self, task_id: str) -> ToolResult:
        """The exact provider item the native Task came from (its source, native
        locator and content inside untrusted-content markers); details:
        ``{"source", "locator"}``."""
        ...

    async def channel_publish(self, task_id: str, operation_id: str, text: str) -> ToolResult:
        """Post ``text`` to the exact provider item the native Task came from, at most
        once per ``operation_id`` (through the per-delivery serializer: a retried call
        is the same delivery); details: ``{"deliveryId", "providerResponseId"}``.

        Raises:
            ToolError: as every tool, and also: not a native Task, the
                ``operation_id`` reused with other text, the delivery failed (call again
                with the same ``operation_id``) or its outcome is unknown (never sent
                again automatically).
        """
        ...
