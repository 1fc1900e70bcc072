"""The ``subprocess`` runtime: an agent program in any language, over the agent protocol.

The host starts ``A2A_AGENT_COMMAND`` once (:class:`~taskplane.bridge.agent_process.
AgentProcess` restarts it when it exits) and speaks JSON-RPC 2.0, one JSON object per
line, on its stdin/stdout (``docs/agent-protocol.md``):

- host → agent request ``turn`` ``{taskId, sessionId, sessionDir, prompt, tools}``;
  the agent's response ends the turn (an error response fails it); a Task left
  unsettled gets another ``turn`` whose prompt is a reminder (a bounded number);
- agent → host requests ``tool_call`` ``{turn, name, arguments}`` while that turn is
  open, answered with ``{text, details}`` or a JSON-RPC error;
- host → agent notifications ``cancel`` ``{taskId}`` (the turn was cancelled) and
  ``release`` ``{taskId, sessionId}`` (the Task's session is closed);
- host → agent request ``triage`` ``{message}`` (``A2A_AGENT_TRIAGE`` on): a result
  ``{"reply": "<text>"}`` answers a new send with a direct Message; ``{"reply":
  null}``, an error or no answer within ``A2A_AGENT_TRIAGE_TIMEOUT_MS`` makes it a
  Task (:mod:`taskplane.bridge.triage`). An agent answering ``-32601`` is not asked
  again.

Several turns (of different Tasks) may be open at once. A program that exits fails
every open turn (the wake queue retries them); a cancelled turn sends ``cancel``.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from taskplane.bridge import jsonrpc
from taskplane.bridge.agent_process import AgentProcess, AgentUnavailable
from taskplane.bridge.runtime import session_id
from taskplane.bridge.sessions import ensure_session_dir
from taskplane.bridge.tool_api import TaskTools
from taskplane.bridge.tool_calls import call_tool, result_json
from taskplane.bridge.tool_schemas import tool_specs
from taskplane.bridge.triage import DEFAULT_TRIAGE_TIMEOUT_S, bounded_reply
from taskplane.bridge.turn_outcome import PlainTextPolicy, SettleWatch, settle_turn
from taskplane.errors import ToolError
from taskplane.model.codec import encode
from taskplane.model.types import Message, Part

log = logging.getLogger("taskplane.bridge.subprocess")

TURN_INBOX = 16
"""Messages (tool calls, the response) buffered per open turn."""
NOTIFY_TIMEOUT_S = 1.0
"""How long a ``cancel``/``release`` notification may wait for the agent's stdin."""


class AgentTurnFailed(RuntimeError):
    """The agent answered the turn with an error, or exited while it was open."""


@attrs.define
class _OpenTurn:
    task_id: str
    inbox: trio.MemorySendChannel[dict[str, Any]]
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    sent: bool = False
    failure: str | None = None


class SubprocessRuntime:
    """An :class:`~taskplane.bridge.runtime.AgentRuntime` over an agent program.

    Args:
        command: the program and its arguments.
        store_root: session directories live under ``<store root>/agent-sessions``.
        plain_text: what a turn result's ``text`` means (``A2A_AGENT_PLAIN_TEXT``).
        triage: send ``triage`` for new sends (``A2A_AGENT_TRIAGE``).
        triage_timeout_s: how long a ``triage`` answer may take, in seconds.
    Start :meth:`serve` in a nursery before the first turn.
    """

    def __init__(
        self,
        command: Sequence[str],
        store_root: Path,
        *,
        plain_text: PlainTextPolicy = PlainTextPolicy.REMIND,
        triage: bool = False,
        triage_timeout_s: float = DEFAULT_TRIAGE_TIMEOUT_S,
    ) -> None:
        self._plain_text = plain_text
        self._triage = triage
        self._triage_timeout_s = triage_timeout_s
        self._triages: dict[int, trio.MemorySendChannel[dict[str, Any]]] = {}
        self.process = AgentProcess(command, self._on_message, self._on_exit)
        self._store_root = store_root
        self._ids = itertools.count(1)
        self._turns: dict[int, _OpenTurn] = {}
        self._sessions: set[str] = set()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Supervise the agent program until cancelled.

        Raises:
            OSError: the program could not be started the first time.
        """
        await self.process.run(task_status=task_status)

    def triage(self, message: Message) -> Sequence[Part] | None:
        """No decision without I/O: see :meth:`reply_directly`."""
        return None

    async def reply_directly(self, message: Message) -> Sequence[Part] | None:
        """Ask the program with a ``triage`` request (module docstring); ``None``: a Task."""
        if not self._triage:
            return None
        return await bounded_reply(
            lambda: self._ask_triage(message), self._triage_timeout_s, "subprocess"
        )

    async def _ask_triage(self, message: Message) -> Any:
        request_id = next(self._ids)
        inbox, receive = trio.open_memory_channel[dict[str, Any]](1)
        self._triages[request_id] = inbox
        try:
            await self.process.wait_running()
            await self.process.send(
                jsonrpc.request(request_id, "triage", {"message": encode(message)})
            )
            async with receive:
                answer = await receive.receive()
        finally:
            del self._triages[request_id]
            inbox.close()
        error = answer.get("error")
        if isinstance(error, dict) and error.get("code") == jsonrpc.METHOD_NOT_FOUND:
            self._triage = False  # an agent without triage: do not ask it again
            log.info(
                "the agent program has no triage method; every message becomes a task",
                extra={"event": "agent_triage_unsupported"},
            )
            return None
        if error is not None:
            raise AgentTurnFailed(f"the agent failed its triage: {error}")
        result = answer.get("result")
        return result.get("reply") if isinstance(result, dict) else None

    async def run_turn(self, task_id: str, prompt: str, tools: TaskTools) -> None:
        """Send ``turn`` and answer the agent's tool calls until it responds; while the
        Task is unsettled, send ``turn`` again with a reminder as its prompt
        (:mod:`taskplane.bridge.turn_outcome`; a result's ``text`` is a plain-text answer).

        A turn that starts while the program is being restarted waits for it.
        Raises:
            AgentTurnFailed: an error response, or the program exited meanwhile.
            AgentUnavailable: the program stopped reading its stdin.
            TurnUnsettled: the agent kept ending its turn without settling the Task.
        Cancellation: at any await; the agent is sent ``cancel`` ``{taskId}``.
        """
        directory = await ensure_session_dir(self._store_root, task_id)

        async def step(text: str, watch: SettleWatch) -> str | None:
            return await self._turn(task_id, text, watch, directory)

        await settle_turn(task_id, prompt, tools, self._plain_text, step)

    async def _turn(
        self, task_id: str, prompt: str, tools: TaskTools, directory: Path
    ) -> str | None:
        """One ``turn`` request; returns its result's ``text`` if it is a string."""
        turn_id = next(self._ids)
        inbox, receive = trio.open_memory_channel[dict[str, Any]](TURN_INBOX)
        turn = _OpenTurn(task_id, inbox)
        self._turns[turn_id] = turn
        self._sessions.add(task_id)
        params = {
            "taskId": task_id,
            "sessionId": session_id(task_id),
            "sessionDir": str(directory),
            "prompt": prompt,
            "tools": tool_specs(channels=tools.channel_tools),
        }
        try:
            with turn.scope:
                await self.process.wait_running()
                await self.process.send(jsonrpc.request(turn_id, "turn", params))
                turn.sent = True
                async with receive:
                    async for message in receive:
                        if "method" in message:
                            await self._answer(message, tools)
                            continue
                        if "error" in message:
                            raise AgentTurnFailed(f"the agent failed the turn: {message['error']}")
                        result = message.get("result")
                        text = result.get("text") if isinstance(result, dict) else None
                        return text if isinstance(text, str) else None
            raise AgentTurnFailed(turn.failure or "the turn ended without a response")
        except trio.Cancelled:
            with trio.CancelScope(shield=True, deadline=trio.current_time() + NOTIFY_TIMEOUT_S):
                await self._notify("cancel", {"taskId": task_id})
            raise
        finally:
            del self._turns[turn_id]
            inbox.close()

    async def _answer(self, message: dict[str, Any], tools: TaskTools) -> None:
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        try:
            name = params.get("name")
            result = await call_tool(tools, str(name), params.get("arguments", {}))
        except ToolError as exc:
            reply = jsonrpc.error(message.get("id"), jsonrpc.TOOL_ERROR, str(exc))
        else:
            reply = jsonrpc.result(message.get("id"), result_json(result))
        await self.process.send(reply)

    async def _on_message(self, message: dict[str, Any]) -> None:
        """Route one message from the program to its open turn."""
        method, request_id = message.get("method"), message.get("id")
        waiting = self._triages.get(request_id) if isinstance(request_id, int) else None
        if method is None and waiting is not None:
            with contextlib.suppress(trio.WouldBlock, trio.BrokenResourceError):
                waiting.send_nowait(message)
            return
        if method is None:
            turn = self._turns.get(request_id) if isinstance(request_id, int) else None
        elif request_id is None:
            return  # a notification from the agent: none are defined; ignored
        elif method != "tool_call":
            await self._reply_error(request_id, jsonrpc.METHOD_NOT_FOUND, f"no method {method!r}")
            return
        else:
            params = message.get("params")
            ref = params.get("turn") if isinstance(params, dict) else None
            turn = self._turns.get(ref) if isinstance(ref, int) else None
            if turn is None:
                await self._reply_error(
                    request_id, jsonrpc.INVALID_PARAMS, f"turn {ref!r} is not open"
                )
                return
        if turn is None:
            return  # a response to a turn that is no longer open
        try:
            await turn.inbox.send(message)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            if method is not None:
                await self._reply_error(request_id, jsonrpc.INVALID_PARAMS, "the turn has ended")

    async def _reply_error(self, request_id: Any, code: int, text: str) -> None:
        try:
            await self.process.send(jsonrpc.error(request_id, code, text))
        except AgentUnavailable:
            pass

    def _on_exit(self, reason: str) -> None:
        """Fail the turns the exited program had received (the others wait for the
        next one), and answer the open triages at once (each send becomes a Task)."""
        gone = {"error": {"code": -1, "message": reason}}
        for waiting in self._triages.values():
            with contextlib.suppress(trio.WouldBlock, trio.BrokenResourceError):
                waiting.send_nowait(gone)
        for turn in self._turns.values():
            if turn.sent:
                turn.failure = reason
                turn.scope.cancel()

    async def _notify(self, method: str, params: dict[str, Any]) -> None:
        try:
            await self.process.send(jsonrpc.notification(method, params))
        except AgentUnavailable:
            pass

    async def release(self, task_id: str) -> None:
        """Send ``release`` ``{taskId, sessionId}`` (the session directory stays)."""
        self._sessions.discard(task_id)
        with trio.move_on_after(NOTIFY_TIMEOUT_S):
            await self._notify("release", {"taskId": task_id, "sessionId": session_id(task_id)})

    async def aclose(self) -> None:
        """Release every session that had a turn since startup."""
        for task_id in sorted(self._sessions):
            await self.release(task_id)
