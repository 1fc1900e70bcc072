"""The per-task owner: the only writer of one Task, and its subscribers' fan-out.

Every mutation of Task ``T`` (status, history, artifacts, cancel, tool calls,
continuations) is a request to owner(T), applied in arrival order: decide with a pure
function (:mod:`taskplane.actors.logic`), commit through the store, then show the
change to subscribers ("durable first, then visible"). The owner keeps the last
committed snapshot and its version; a crashed owner restarts from durable state.

Subscribers (SSE streams, blocking sends waiting to settle) each get a bounded
buffer of ``SUBSCRIBER_BUFFER`` frames. A subscriber whose buffer is full is
disconnected (its channel closes without a terminal frame) and never blocks the
owner, other subscribers or the agent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from taskplane.actors import logic
from taskplane.errors import TaskNotFound
from taskplane.model.types import StreamResponse, Task
from taskplane.scope import Scope
from taskplane.store.contract import TaskStore
from taskplane.store.records import (
    Accepted,
    Activation,
    Fence,
    Locator,
    Record,
    StoredTask,
    TaskChange,
)

log = logging.getLogger("taskplane.actors.owner")

SUBSCRIBER_BUFFER = 32
"""Frames buffered per subscriber before it is disconnected as too slow."""

Change = Callable[[Task], Task]
"""A pure decision: the new Task, or raise the A2A error that refuses the change."""

AlsoRecord = tuple[Record, ...]
"""Extra records committed in the same transaction as a change (journal, evidence)."""


class TaskOwner:
    """State of owner(T). Its methods run only inside the owner's actor loop.

    Args:
        task_id: the Task this owner serves.
        store: the task store.
        now_ms: wall clock, ms since the epoch (a parameter so tests control it).
    """

    def __init__(self, task_id: str, store: TaskStore, now_ms: Callable[[], int]) -> None:
        self.task_id = task_id
        self.store = store
        self.now_ms = now_ms
        self.stored: StoredTask | None = None
        self.subscribers: list[trio.MemorySendChannel[StreamResponse]] = []
        self.snapshot_subscribers: set[trio.MemorySendChannel[StreamResponse]] = set()
        """Those of ``subscribers`` that get each change as the whole Task."""

    async def load(self, adopted: StoredTask | None = None) -> None:
        """Read the Task's durable state (before serving: ready means ready).

        ``adopted``: the snapshot the commit that created the Task returned; used
        instead of reading the store (see ``OwnerRegistry.adopt``).
        """
        if adopted is not None and adopted.task.id == self.task_id:
            self.stored = adopted
            return
        self.stored = await self.store.find_task(self.task_id)

    def _current(self, scope: Scope | None) -> StoredTask:
        stored = self.stored
        if stored is None or (scope is not None and stored.scope != scope):
            raise TaskNotFound(
                f"task {self.task_id} was not found", metadata={"taskId": self.task_id}
            )
        return stored

    @property
    def idle(self) -> bool:
        """No subscriber is attached (the owner may retire)."""
        self.subscribers = [s for s in self.subscribers if s.statistics().open_receive_channels > 0]
        self.snapshot_subscribers.intersection_update(self.subscribers)
        return not self.subscribers

    @property
    def subscriber_count(self) -> int:
        """Subscriptions attached now (closed ones may still be counted until the
        next publish or :attr:`idle` check)."""
        return len(self.subscribers)

    @property
    def finished(self) -> bool:
        """The Task is missing or terminal: nothing more will happen to it."""
        return self.stored is None or self.stored.task.status.state.is_terminal

    async def snapshot(self, scope: Scope | None) -> StoredTask:
        """The last committed state. Raises TaskNotFound outside ``scope``."""
        return self._current(scope)

    async def mutate(
        self,
        change: Change,
        scope: Scope | None,
        also: AlsoRecord | None = None,
        fence: Fence | None = None,
    ) -> StoredTask:
        """Apply ``change``, commit it (with ``also``), then fan its events out.

        Args:
            scope: the caller's scope, or ``None`` for internal callers (wake queue,
                task tools) that were already authorized.
            fence: the turn lease the change is made under (``None``: no turn's).
        Raises:
            Fenced: ``fence`` is no longer current; nothing changed.
            TaskNotFound: outside ``scope``; whatever ``change`` raises to refuse.
            StoreUnavailable: the commit failed; nothing changed.
        """
        before = self._current(scope)
        after_task = change(before.task)
        now = self.now_ms()
        if after_task == before.task and not also:
            return before
        self.stored = await self.store.apply(TaskChange(before, after_task, now, also or (), fence))
        self._publish(before.task, after_task)
        return self.stored

    async def accept(
        self,
        act: Activation,
        locator: Locator,
        after_commit: Callable[[Accepted], None] | None = None,
    ) -> Accepted:
        """Accept a continuation of this Task (or find its duplicate) and publish it.

        ``after_commit`` (the wake notification) runs right after the COMMIT even if
        this owner or its caller is cancelled meanwhile.
        """
        before = self._current(act.scope)
        result = await self.store.accept(act, locator, self.now_ms(), after_commit=after_commit)
        if result.disposition == "continued" and result.stored is not None:
            self.stored = result.stored
            self._publish(before.task, result.stored.task)
        return result

    async def subscribe(
        self, scope: Scope | None, *, snapshots: bool = False
    ) -> trio.MemoryReceiveChannel[StreamResponse]:
        """A stream of this Task: first ``{task}`` (the snapshot), then each change
        (its status and artifact updates; with ``snapshots``, the whole Task as
        ``{task}`` once per committed change: what a blocking send waits on).

        The stream closes after a terminal status, or early (without one) when the
        subscriber falls ``SUBSCRIBER_BUFFER`` frames behind. For a terminal Task it
        holds only the snapshot.
        """
        stored = self._current(scope)
        tx, rx = trio.open_memory_channel[StreamResponse](SUBSCRIBER_BUFFER)
        tx.send_nowait(StreamResponse(task=stored.task))
        if stored.task.status.state.is_terminal:
            tx.close()
        else:
            self.subscribers.append(tx)
            if snapshots:
                self.snapshot_subscribers.add(tx)
        return rx

    def _publish(self, before: Task, after: Task) -> None:
        if before.status.state is not after.status.state:
            log.info(
                "task %s: %s -> %s",
                after.id,
                before.status.state.name,
                after.status.state.name,
                extra={
                    "event": "task_state_changed",
                    "taskId": after.id,
                    "contextId": after.context_id,
                    "from": before.status.state.name,
                    "to": after.status.state.name,
                },
            )
        frames = logic.events(before, after)
        whole = (StreamResponse(task=after),) if self.snapshot_subscribers else ()
        keep: list[trio.MemorySendChannel[StreamResponse]] = []
        for sub in self.subscribers:
            try:
                for frame in whole if sub in self.snapshot_subscribers else frames:
                    sub.send_nowait(frame)
            except trio.WouldBlock:
                log.warning(
                    "subscriber of task %s is too slow; disconnecting it",
                    self.task_id,
                    extra={"event": "subscriber_disconnected", "taskId": self.task_id},
                )
                sub.close()
                continue
            except trio.BrokenResourceError:
                sub.close()
                continue
            keep.append(sub)
        if after.status.state.is_terminal:
            for sub in keep:
                sub.close()
            keep = []
        self.subscribers = keep
        self.snapshot_subscribers.intersection_update(keep)

    def close_subscribers(self) -> None:
        """End every subscription (owner shutdown or crash)."""
        for sub in self.subscribers:
            sub.close()
        self.subscribers = []
        self.snapshot_subscribers.clear()
