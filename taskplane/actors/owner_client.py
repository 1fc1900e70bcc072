"""The typed client of the per-task owners: one method per owner message.

Callers (the plane facade, intake, the wake actor, the toolbox) never build owner
messages by hand. Each method posts one message to owner(T) through the
:class:`~taskplane.actors.registry.OwnerRegistry` (starting the owner if needed) and
waits for its reply.

Errors common to every method:
    Overloaded: owner(T)'s inbox is full (503, retry); nothing was sent.
    ActorGone: owner(T) stopped or crashed before answering.
    StoreUnavailable: its commit failed; nothing changed.
Cancellation (every method): cancelling the caller drops only the reply; once posted
the message is still handled, and its change may still commit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import attrs
import trio

from taskplane.actors.owner_messages import (
    ApplyToolCall,
    Cancel,
    ContinueTask,
    FailOverflowed,
    FailTask,
    GetSnapshot,
    GrantTurn,
    OwnerMessage,
    Subscribe,
)
from taskplane.actors.registry import OwnerRegistry
from taskplane.actors.tool_calls import ToolCall, TurnAuthority
from taskplane.actors.wake_queue import Wake
from taskplane.mailbox import ReplyTo, ask
from taskplane.model.types import StreamResponse, Task
from taskplane.scope import Scope
from taskplane.store.records import (
    Accepted,
    Activation,
    ActivationState,
    Fence,
    Locator,
    Record,
    StoredTask,
)

T = TypeVar("T")


@attrs.frozen
class OwnerClient:
    """Typed requests to owner(T). Safe to share; holds no state of its own.

    Args:
        registry: finds or starts each owner and posts to its inbox.
        now_ms: wall clock in ms since the epoch (a parameter for tests).
    """

    registry: OwnerRegistry
    now_ms: Callable[[], int]

    async def _ask(self, task_id: str, build: Callable[[ReplyTo[T]], OwnerMessage]) -> T:
        def post(message: OwnerMessage) -> None:
            self.registry.post(task_id, message)

        return await ask(post, build, f"the owner of task {task_id}")

    def adopt(self, stored: StoredTask) -> None:
        """Start owner(T) of a Task just created from its committed snapshot (no
        store read); see :meth:`~taskplane.actors.registry.OwnerRegistry.adopt`."""
        self.registry.adopt(stored)

    async def snapshot(self, task_id: str, scope: Scope | None = None) -> StoredTask:
        """The last committed Task. Raises TaskNotFound outside ``scope``."""
        return await self._ask(task_id, lambda reply: GetSnapshot(scope, reply))

    async def subscribe(
        self, task_id: str, scope: Scope | None = None, *, snapshots: bool = False
    ) -> trio.MemoryReceiveChannel[StreamResponse]:
        """Frames of the Task: ``{task}`` first, then every committed change (with
        ``snapshots``: as the whole Task); closed after a terminal status. Raises
        TaskNotFound outside ``scope``."""
        return await self._ask(task_id, lambda reply: Subscribe(scope, reply, snapshots))

    async def cancel(self, task_id: str, scope: Scope) -> Task:
        """Cancel the Task and stop its running turn (even if this caller is then
        cancelled). Raises TaskNotFound outside ``scope``, TaskNotCancelable."""
        now = self.now_ms()
        return await self._ask(task_id, lambda reply: Cancel(scope, now, reply))

    async def continue_task(
        self,
        task_id: str,
        activation: Activation,
        locator: Locator,
        after_commit: Callable[[Accepted], None] | None = None,
    ) -> Accepted:
        """Accept a continuation of the Task (or its duplicate). Raises TaskNotFound
        outside the activation's scope, InvalidRequest, UnsupportedOperation,
        DuplicateMessageId."""
        return await self._ask(
            task_id, lambda reply: ContinueTask(activation, locator, after_commit, reply)
        )

    async def grant_turn(self, wake: Wake, state: ActivationState) -> Task | None:
        """WORKING + WOKEN + WAKE_DELIVERED in one commit; ``None`` if cancel won."""
        now = self.now_ms()
        return await self._ask(wake.task_id, lambda reply: GrantTurn(wake, state, now, reply))

    async def fail_overflowed(self, wake: Wake) -> None:
        """Record WAKE_FAILED for an overflowed wake; fail its Task if never started."""
        now = self.now_ms()

        def build(reply: ReplyTo[None]) -> OwnerMessage:
            return FailOverflowed(wake, now, reply)

        await self._ask(wake.task_id, build)

    async def fail_task(self, wake: Wake, reason: str, records: tuple[Record, ...]) -> Task:
        """Give up on ``wake``: ``records`` committed with the Task moved to FAILED
        (a status message says ``reason``; a terminal Task is kept as it is)."""
        now = self.now_ms()

        def build(reply: ReplyTo[Task]) -> OwnerMessage:
            return FailTask(wake, reason, records, now, reply)

        return await self._ask(wake.task_id, build)

    async def apply_tool_call(
        self, task_id: str, call: ToolCall, turn: TurnAuthority, fence: Fence | None = None
    ) -> Task:
        """Apply a task tool's change under ``turn``'s authority (and ``fence``, the
        turn's wake lease on a shared store). Raises ToolError, Fenced."""
        now = self.now_ms()
        return await self._ask(
            task_id, lambda reply: ApplyToolCall(call, turn, now, reply, fence)
        )
