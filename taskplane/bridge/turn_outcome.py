"""A turn that ends without settling its Task: reminders, and what plain text means.

Design rule "A turn ends settled or says why": an agent's turn should end with the
Task settled (``a2a_complete_task`` or ``a2a_require_input`` succeeded). Models,
small local ones especially, often answer in plain text instead; programs forget the
call. Every runtime runs its turn through :func:`settle_turn`, which, within the same
turn and the same session, follows the agent's unsettled answer with a reminder
naming the tool to call, at most ``MAX_REMINDERS`` times. ``A2A_AGENT_PLAIN_TEXT``
(:class:`PlainTextPolicy`) says what a final plain-text answer means:

- ``complete``: it becomes the response artifact and completes the Task (a text
  over ``MAX_TEXT_CHARS`` characters, the task tools' bound, is cut to it and ends
  with a ``[N more characters cut]`` marker: never silently);
- ``remind`` (default): the agent is reminded; still unsettled after the reminders,
  the turn raises :class:`TurnUnsettled` and the Task fails;
- ``fail``: the turn raises :class:`TurnUnsettled` at once.

The agent's text is never lost: the ``openai`` runtime keeps it in the session
transcript, and :class:`TurnUnsettled` carries it into the failed Task's status
message (the wake queue fails the Task at once, without re-offering it).
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, Literal

from taskplane.bridge.tool_api import TaskTools, ToolResult
from taskplane.bridge.tools import MAX_TEXT_CHARS, clip
from taskplane.errors import ToolError
from taskplane.model.types import Part

MAX_REMINDERS: Final = 2
"""Reminders sent within one turn before an unsettled answer ends it."""


class PlainTextPolicy(enum.StrEnum):
    """``A2A_AGENT_PLAIN_TEXT``: what a final plain-text answer means (module docstring)."""

    COMPLETE = "complete"
    REMIND = "remind"
    FAIL = "fail"


class TurnUnsettled(Exception):
    """The agent ended its turn without settling the Task (after the reminders, or at
    once under policy ``fail``).

    The wake queue fails the Task at once with ``str(exc)`` as its status message
    reason; it quotes the agent's last text, up to ``MAX_TEXT_CHARS`` characters
    (a longer one is cut with a ``[N more characters cut]`` marker; log lines quote
    less, ``MAX_LOG_TEXT_CHARS``).

    Attributes:
        text: the agent's last plain-text answer, whole (``""``: none).
    """

    def __init__(self, reason: str, text: str) -> None:
        self.text = text
        quoted = f"; its last answer was: {clip(text, MAX_TEXT_CHARS)}" if text else ""
        super().__init__(f"{reason}{quoted}")


def reminder_prompt(task_id: str, reminder: int) -> str:
    """The follow-up message of reminder ``reminder`` (1-based): names the tools."""
    return (
        f"[channels] Task {task_id} is not finished: your answer was not recorded. "
        f"Call a2a_complete_task with taskId {task_id} and your answer as 'response' "
        "(or outcome 'rejected' with the reason), or a2a_require_input to ask the "
        f"caller a question. Reminder {reminder} of {MAX_REMINDERS}."
    )


class SettleWatch:
    """A :class:`~taskplane.bridge.tool_api.TaskTools` that forwards every call and
    notes whether one settled the Task (``a2a_complete_task`` or ``a2a_require_input``
    returned without :class:`~taskplane.errors.ToolError`)."""

    def __init__(self, tools: TaskTools, task_id: str) -> None:
        self._tools = tools
        self.task_id = task_id
        self.channel_tools = tools.channel_tools
        self.fence = tools.fence
        self.settled = False

    async def a2a_read_task(self, task_id: str) -> ToolResult:
        """Forwarded."""
        return await self._tools.a2a_read_task(task_id)

    async def a2a_complete_task(
        self,
        task_id: str,
        response: str,
        outcome: Literal["completed", "rejected"] = "completed",
        outputs: Sequence[Mapping[str, Any]] = (),
        extra_parts: Sequence[Part] = (),
    ) -> ToolResult:
        """Forwarded; a success settles."""
        result = await self._tools.a2a_complete_task(
            task_id, response, outcome, outputs, extra_parts
        )
        self.settled = True
        return result

    async def a2a_record_output(self, task_id: str, output: str, value: Any) -> ToolResult:
        """Forwarded."""
        return await self._tools.a2a_record_output(task_id, output, value)

    async def a2a_require_input(
        self,
        task_id: str,
        question: str,
        requested_schema: Mapping[str, Any] | None = None,
        kind: Literal["input", "auth"] = "input",
    ) -> ToolResult:
        """Forwarded; a success settles."""
        result = await self._tools.a2a_require_input(task_id, question, requested_schema, kind)
        self.settled = True
        return result

    async def channel_read(self, task_id: str) -> ToolResult:
        """Forwarded."""
        return await self._tools.channel_read(task_id)

    async def channel_publish(self, task_id: str, operation_id: str, text: str) -> ToolResult:
        """Forwarded (a publication does not settle the Task)."""
        return await self._tools.channel_publish(task_id, operation_id, text)


Step = Callable[[str, SettleWatch], Awaitable[str | None]]
"""One pass of the agent on a prompt (the wake prompt, then each reminder) with the
turn's watched tools; returns its final plain text (``None`` or ``""``: none)."""


async def settle_turn(
    task_id: str, prompt: str, tools: TaskTools, policy: PlainTextPolicy, step: Step
) -> None:
    """Run ``step`` on ``prompt``, then on reminders, until the Task is settled.

    Raises:
        TurnUnsettled: still unsettled after ``MAX_REMINDERS`` reminders (policy
            ``remind``, or ``complete`` without text), at once with text under
            ``fail``, or the ``complete`` policy's own call was refused.
        Exception: whatever ``step`` raises (the turn failed).
    """
    watch = SettleWatch(tools, task_id)
    text: str | None = None
    for reminder in range(MAX_REMINDERS + 1):
        text = await step(prompt if reminder == 0 else reminder_prompt(task_id, reminder), watch)
        if watch.settled:
            return
        if text and policy is PlainTextPolicy.COMPLETE:
            await _complete_with(watch, task_id, text)
            return
        if text and policy is PlainTextPolicy.FAIL:
            raise TurnUnsettled(
                "the agent answered in plain text without calling a2a_complete_task "
                "(A2A_AGENT_PLAIN_TEXT=fail)",
                text,
            )
    raise TurnUnsettled(
        f"the agent ended its turn {MAX_REMINDERS + 1} times without calling "
        "a2a_complete_task or a2a_require_input",
        text or "",
    )


async def _complete_with(watch: SettleWatch, task_id: str, text: str) -> None:
    try:
        await watch.a2a_complete_task(task_id, clip(text, MAX_TEXT_CHARS))
    except ToolError as exc:
        raise TurnUnsettled(
            f"its plain-text answer could not complete the Task ({exc})", text
        ) from None
