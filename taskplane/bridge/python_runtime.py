"""The ``python`` runtime: an async function called once per turn.

``A2A_AGENT_CALLABLE=package.module:function`` names an ``async def
function(prompt: str, tools: TurnTools) -> str | None``. It runs on the server's trio
event loop: it may await trio primitives and the tools, must not block the thread
(use ``trio.to_thread.run_sync`` for blocking work), and is cancelled at any await
when its turn is. An exception fails the turn (the wake queue retries it).

A function that returns without settling the Task is called again in the same turn
with a reminder as its prompt; a returned string is a plain-text answer, which
``A2A_AGENT_PLAIN_TEXT`` may turn into the response (:mod:`taskplane.bridge.turn_outcome`).

With ``A2A_AGENT_TRIAGE`` on, the same module's ``async def triage(message: Message)
-> str | None`` is awaited for each new send (bounded by ``A2A_AGENT_TRIAGE_TIMEOUT_MS``):
a string is a direct reply, ``None`` makes the send a Task (:mod:`taskplane.bridge.triage`).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs

from taskplane.bridge.runtime import session_id
from taskplane.bridge.sessions import ensure_session_dir
from taskplane.bridge.tool_api import TaskTools, ToolResult
from taskplane.bridge.tool_calls import call_tool
from taskplane.bridge.tool_schemas import tool_specs
from taskplane.bridge.triage import DEFAULT_TRIAGE_TIMEOUT_S, bounded_reply
from taskplane.bridge.turn_outcome import PlainTextPolicy, SettleWatch, settle_turn
from taskplane.model.types import DataValue, Message, Part, Task

__all__ = ["AgentFunction", "DataValue", "Message", "Part", "PythonRuntime", "Task"]
__all__ += ["TriageFunction"]
__all__ += ["TurnTools", "load_callable", "load_triage"]


@attrs.frozen
class TurnTools:
    """The tools of one turn, bound to its Task.

    Attributes:
        task_id: the Task this turn serves.
        session_id: its durable session ID (``task-`` + 40 hex).
        session_dir: a directory for the session's own files; survives restarts.
        tools: the four task tools (``a2a_read_task(task_id)``, ...).
    """

    task_id: str
    session_id: str
    session_dir: Path
    tools: TaskTools

    async def read(self) -> ToolResult:
        """``a2a_read_task``: ``text`` is the history inside untrusted markers,
        ``details["task"]`` the :class:`~taskplane.model.types.Task` (importable
        from this module as ``Task``)."""
        return await self.tools.a2a_read_task(self.task_id)

    async def complete(
        self,
        response: str,
        outcome: Literal["completed", "rejected"] = "completed",
        outputs: Sequence[Mapping[str, Any]] = (),
    ) -> ToolResult:
        """``a2a_complete_task``."""
        return await self.tools.a2a_complete_task(self.task_id, response, outcome, outputs)

    async def record_output(self, output: str, value: Mapping[str, Any]) -> ToolResult:
        """``a2a_record_output``."""
        return await self.tools.a2a_record_output(self.task_id, output, dict(value))

    async def require_input(
        self, question: str, requested_schema: Mapping[str, Any] | None = None
    ) -> ToolResult:
        """``a2a_require_input``."""
        return await self.tools.a2a_require_input(self.task_id, question, requested_schema)

    async def call(self, name: str, arguments: Mapping[str, Any]) -> ToolResult:
        """Call a tool by name with JSON arguments (for LLM frameworks)."""
        return await call_tool(self.tools, name, dict(arguments))

    @staticmethod
    def specs() -> list[dict[str, Any]]:
        """``[{name, description, inputSchema}]`` of the four tools."""
        return tool_specs()


AgentFunction = Callable[[str, TurnTools], Awaitable[str | None]]
TriageFunction = Callable[[Message], Awaitable[str | None]]


def load_callable(spec: str) -> AgentFunction:
    """Import ``package.module:function``.

    Raises:
        ValueError: malformed spec, import failure, or not an async function.
    """
    return _load(spec)  # type: ignore[no-any-return]


def load_triage(spec: str) -> TriageFunction:
    """Import ``triage`` from the module of ``package.module:function``.

    Raises:
        ValueError: as :func:`load_callable`, or the module has no async ``triage``.
    """
    module_name = spec.partition(":")[0]
    return _load(f"{module_name}:triage", spec)  # type: ignore[no-any-return]


def _load(spec: str, given: str | None = None) -> Any:
    given = given or spec
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"A2A_AGENT_CALLABLE={given!r} must be package.module:function")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ValueError(
            f"A2A_AGENT_CALLABLE={given!r}: cannot import {module_name}: {exc}"
        ) from None
    function = getattr(module, attribute, None)
    if function is None:
        raise ValueError(f"A2A_AGENT_CALLABLE={given!r}: {module_name} has no {attribute!r}")
    if not inspect.iscoroutinefunction(function):
        raise ValueError(f"A2A_AGENT_CALLABLE={given!r}: {attribute} is not an async function")
    return function


class PythonRuntime:
    """An :class:`~taskplane.bridge.runtime.AgentRuntime` calling ``function`` per turn.

    Args:
        function: the agent (module docstring).
        store_root: session directories live under ``<store root>/agent-sessions``.
        plain_text: what a returned string means (``A2A_AGENT_PLAIN_TEXT``).
        triage: the module's ``triage`` function (``A2A_AGENT_TRIAGE`` on), or ``None``.
        triage_timeout_s: its bound, in seconds.
    """

    def __init__(
        self,
        function: AgentFunction,
        store_root: Path,
        *,
        plain_text: PlainTextPolicy = PlainTextPolicy.REMIND,
        triage: TriageFunction | None = None,
        triage_timeout_s: float = DEFAULT_TRIAGE_TIMEOUT_S,
    ) -> None:
        self._function = function
        self._store_root = store_root
        self._plain_text = plain_text
        self._triage = triage
        self._triage_timeout_s = triage_timeout_s

    def triage(self, message: Message) -> Sequence[Part] | None:
        """No decision without I/O: see :meth:`reply_directly`."""
        return None

    async def reply_directly(self, message: Message) -> Sequence[Part] | None:
        """The ``triage`` function's reply (bounded), or ``None`` (a Task)."""
        triage = self._triage
        if triage is None:
            return None
        return await bounded_reply(lambda: triage(message), self._triage_timeout_s, "python")

    async def run_turn(self, task_id: str, prompt: str, tools: TaskTools) -> None:
        """Call the function with the prompt and the turn's :class:`TurnTools`, then
        with reminders while it leaves the Task unsettled.

        Raises:
            TurnUnsettled: the function kept returning without settling the Task.
            Exception: whatever the function raises.
        """
        directory = await ensure_session_dir(self._store_root, task_id)
        sid = session_id(task_id)

        async def step(text: str, watch: SettleWatch) -> str | None:
            answer = await self._function(text, TurnTools(task_id, sid, directory, watch))
            return answer if isinstance(answer, str) else None

        await settle_turn(task_id, prompt, tools, self._plain_text, step)

    async def release(self, task_id: str) -> None:
        """Nothing live to close (the session directory stays)."""

    async def aclose(self) -> None:
        """Nothing live to close."""
