"""owner(T)'s inbox: the closed set of messages a per-task owner handles.

Each message is a frozen record carrying the send end of its size-1 reply channel
(:data:`~taskplane.mailbox.ReplyTo`). Callers do not build them by hand: they
use :class:`~taskplane.actors.owner_client.OwnerClient`. owner(T) handles them one at
a time, in arrival order (:mod:`taskplane.actors.owner_inbox`), so it is its node's
only writer of its Task (design rule "One writer per Task").
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import trio

from taskplane.actors.tool_calls import ToolCall, TurnAuthority
from taskplane.actors.wake_queue import Wake
from taskplane.mailbox import ReplyTo
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


@attrs.frozen(eq=False)
class GetSnapshot:
    """Reply with the last committed Task (``scope=None``: an internal caller)."""

    scope: Scope | None
    reply: ReplyTo[StoredTask]


@attrs.frozen(eq=False)
class Subscribe:
    """Reply with a stream of the Task: its snapshot, then every committed change
    (``snapshots``: each change as the whole Task, ``{"task"}``, instead of its
    status and artifact updates)."""

    scope: Scope | None
    reply: ReplyTo[trio.MemoryReceiveChannel[StreamResponse]]
    snapshots: bool = False


@attrs.frozen(eq=False)
class Cancel:
    """Move the Task to CANCELED and stop its running turn at once (``now_ms``: ms
    since the epoch). Replies with the canceled Task."""

    scope: Scope
    now_ms: int
    reply: ReplyTo[Task]


@attrs.frozen(eq=False)
class ContinueTask:
    """Accept ``activation`` as a continuation of this Task (or find its duplicate).

    ``after_commit`` (the wake notification) runs right after the COMMIT, whether or
    not the caller still waits.
    """

    activation: Activation
    locator: Locator
    after_commit: Callable[[Accepted], None] | None
    reply: ReplyTo[Accepted]


@attrs.frozen(eq=False)
class GrantTurn:
    """WORKING + ``WOKEN`` + ``WAKE_DELIVERED`` in one commit for ``wake``'s turn.

    Replies with the Task, or ``None`` if a cancel got there first.
    """

    wake: Wake
    state: ActivationState
    now_ms: int
    reply: ReplyTo[Task | None]


@attrs.frozen(eq=False)
class FailOverflowed:
    """Record ``WAKE_FAILED`` for a wake the full queue refused, and fail the Task if
    it never started (design rule "Wake admission is bounded")."""

    wake: Wake
    now_ms: int
    reply: ReplyTo[None]


@attrs.frozen(eq=False)
class FailTask:
    """Give up on ``wake``: commit ``records`` (``WAKE_FAILED`` and its evidence) and
    move a non-terminal Task to FAILED with an agent status message saying
    ``reason``, in one transaction (design rule "Failure is visible"). Replies with
    the Task after it."""

    wake: Wake
    reason: str
    records: tuple[Record, ...]
    now_ms: int
    reply: ReplyTo[Task]


@attrs.frozen(eq=False)
class ApplyToolCall:
    """Apply a task tool's change if the Task holds ``turn``'s authority and is not
    terminal (checked atomically with the commit; ``fence``: the turn's wake lease on a
    shared store, checked in the same transaction). Replies with the Task after it."""

    call: ToolCall
    turn: TurnAuthority
    now_ms: int
    reply: ReplyTo[Task]
    fence: Fence | None = None


@attrs.frozen(eq=False)
class CatchUp:
    """Another node committed ``version`` of the Task (its doorbell, or a poll, said
    so): read the versions after the snapshot, in order, and publish each as a local
    commit is published; stop the local turn if the Task is now terminal. Replies
    with nothing (the event tail does not wait)."""

    version: int
    reply: ReplyTo[None]


OwnerMessage = (
    GetSnapshot
    | Subscribe
    | Cancel
    | ContinueTask
    | GrantTurn
    | FailOverflowed
    | FailTask
    | ApplyToolCall
    | CatchUp
)
"""Everything owner(T) handles."""
