"""How owner(T) handles each message of its inbox (one ``match``, one place).

Every handler runs inside the owner's actor loop, one message at a time, so the
owner stays its node's only writer of its Task (design rule "One writer per Task").
Each answers its message's reply channel exactly once: with a value, or with the A2A
error that refuses the request.
"""

from __future__ import annotations

from typing import assert_never

from taskplane.actors import logic
from taskplane.actors.owner import TaskOwner
from taskplane.actors.owner_messages import (
    ApplyToolCall,
    Cancel,
    CatchUp,
    ContinueTask,
    FailOverflowed,
    FailTask,
    GetSnapshot,
    GrantTurn,
    OwnerMessage,
    Subscribe,
)
from taskplane.actors.tool_calls import apply_tool_call, check_authority
from taskplane.actors.turns import RunningTurns
from taskplane.actors.wake_records import (
    CancelWon,
    given_up_change,
    grant_change,
    grant_records,
    overflow_change,
    wake_failed_record,
)
from taskplane.mailbox import answer
from taskplane.model.types import Task
from taskplane.store.records import Fence, Record


async def handle(owner: TaskOwner, message: OwnerMessage, turns: RunningTurns) -> None:
    """Handle one ``message`` for ``owner`` and answer its reply channel.

    Cancellation: cancelled only when the owner itself stops; the reply channel then
    closes and the caller sees ``ActorGone``. A commit in flight still completes
    (commits are shielded in the store).
    """
    match message:
        case GetSnapshot(scope=scope, reply=reply):
            await answer(reply, owner.snapshot(scope))
        case Subscribe(scope=scope, reply=reply, snapshots=snapshots):
            await answer(reply, owner.subscribe(scope, snapshots=snapshots))
        case Cancel(reply=reply):
            await answer(reply, _cancel(owner, message, turns))
        case ContinueTask(activation=act, locator=locator, after_commit=hook, reply=reply):
            await answer(reply, owner.accept(act, locator, hook))
        case GrantTurn(reply=reply):
            await answer(reply, _grant(owner, message))
        case FailOverflowed(reply=reply):
            await answer(reply, _fail_overflowed(owner, message))
        case FailTask(wake=wake, reason=reason, records=records, now_ms=now, reply=reply):
            await answer(reply, _fail_task(owner, reason, records, now, wake.fence))
        case ApplyToolCall(reply=reply):
            await answer(reply, _apply_tool_call(owner, message))
        case CatchUp(version=version, reply=reply):
            await answer(reply, owner.catch_up(version))
        case _:
            # A type added to OwnerMessage but not handled fails mypy here; at run time
            # it crashes the owner, whose ``handling`` closes the reply: the caller
            # gets ActorGone instead of waiting forever.
            assert_never(message)


async def _cancel(owner: TaskOwner, message: Cancel, turns: RunningTurns) -> Task:
    now = message.now_ms
    stored = await owner.mutate(lambda task: logic.canceled(task, now), message.scope)
    # Inside the owner, not in the caller: a caller that hangs up after sending the
    # cancel must not leave a CANCELED Task whose turn keeps running.
    turns.interrupt(owner.task_id)
    return stored.task


async def _grant(owner: TaskOwner, message: GrantTurn) -> Task | None:
    change = grant_change(message.state, message.now_ms)
    also = grant_records(message.wake, message.state, message.now_ms)
    try:
        return (await owner.mutate(change, None, also, message.wake.fence)).task
    except CancelWon:
        return None


async def _fail_overflowed(owner: TaskOwner, message: FailOverflowed) -> None:
    now = message.now_ms
    also = (wake_failed_record(message.wake, 0, "wake queue overflow", now),)
    await owner.mutate(overflow_change(now), None, also)


async def _fail_task(
    owner: TaskOwner, reason: str, records: tuple[Record, ...], now_ms: int, fence: Fence | None
) -> Task:
    return (await owner.mutate(given_up_change(reason, now_ms), None, records, fence)).task


async def _apply_tool_call(owner: TaskOwner, message: ApplyToolCall) -> Task:
    task_id, turn = owner.task_id, message.turn

    def change(task: Task) -> Task:
        check_authority(task_id, task, turn)
        return apply_tool_call(message.call, task, message.now_ms)

    return (await owner.mutate(change, None, None, message.fence)).task
