"""The per-task owner: this process's writer of one Task, and its subscribers' fan-out.

Every mutation of Task ``T`` (status, history, artifacts, cancel, tool calls,
continuations) is a request to owner(T), applied in arrival order: decide with a pure
function (:mod:`taskplane.actors.logic`), commit through the store, then show the
change to subscribers ("durable first, then visible"). The owner keeps the last
committed snapshot and its version; a crashed owner restarts from durable state.

On a shared store owner(T) may run on several nodes at once (design rule "One writer
per Task"): each write is a compare-and-swap on the Task's version, and a write that
finds the version moved (:class:`~taskplane.errors.VersionConflict`) catches up with
what the other node committed (:meth:`TaskOwner.catch_up`, which also shows it to
this node's subscribers), decides again and retries, at most
:data:`MAX_WRITE_ATTEMPTS` times. The same catch-up shows other nodes' commits as they
are announced (:mod:`taskplane.cluster.events`).

Subscribers (SSE streams, blocking sends waiting to settle) each get a bounded
buffer of ``SUBSCRIBER_BUFFER`` frames. A subscriber whose buffer is full is
disconnected (its channel closes without a terminal frame) and never blocks the
owner, other subscribers or the agent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

import trio

from taskplane.actors import logic
from taskplane.errors import StoreUnavailable, TaskNotFound, VersionConflict
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

MAX_WRITE_ATTEMPTS = 5
"""Compare-and-swap attempts of one change (or continuation) before its
:class:`~taskplane.errors.VersionConflict` reaches the caller (a retryable 503)."""


class TaskHistory(Protocol):
    """Where owner(T) reads the versions of its Task committed after its snapshot."""

    async def versions_after(self, task_id: str, version: int) -> tuple[StoredTask, ...]:
        """The committed versions of ``task_id`` newer than ``version``, oldest first;
        the last is the Task as stored now (versions may be skipped where their
        records were pruned; ``()``: nothing newer, or the Task is gone).

        Raises:
            StoreUnavailable: the store cannot be read.
        """
        ...


class StoreHistory:
    """The :class:`TaskHistory` of a store without change records (one process): the
    Task as stored now, when it is newer."""

    def __init__(self, store: TaskStore) -> None:
        self._store = store

    async def versions_after(self, task_id: str, version: int) -> tuple[StoredTask, ...]:
        """See :meth:`TaskHistory.versions_after`."""
        stored = await self._store.find_task(task_id)
        return (stored,) if stored is not None and stored.version > version else ()


class TaskOwner:
    """State of owner(T). Its methods run only inside the owner's actor loop.

    Args:
        task_id: the Task this owner serves.
        store: the task store.
        now_ms: wall clock, ms since the epoch (a parameter so tests control it).
        history: where other writers' commits are read (default: the store's Task row).
        stop_turn: called with the Task id when a catch-up finds the Task terminal
            (another node canceled or failed it): stops this node's running turn of
            it, as a local cancel does (design rule "Cancel stops the running turn").
    """

    def __init__(
        self,
        task_id: str,
        store: TaskStore,
        now_ms: Callable[[], int],
        history: TaskHistory | None = None,
        stop_turn: Callable[[str], object] | None = None,
    ) -> None:
        self.task_id = task_id
        self.store = store
        self.now_ms = now_ms
        self.history = history or StoreHistory(store)
        self._stop_turn = stop_turn
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

        A compare-and-swap that finds the version moved catches up with the newer
        versions (publishing them), then decides ``change`` again on the new snapshot
        and retries, at most :data:`MAX_WRITE_ATTEMPTS` times (design rule "One writer
        per Task"; ``change`` is pure, so deciding again is safe).

        Args:
            scope: the caller's scope, or ``None`` for internal callers (wake queue,
                task tools) that were already authorized.
            fence: the turn lease the change is made under (``None``: no turn's).
        Raises:
            Fenced: ``fence`` is no longer current; nothing changed.
            TaskNotFound: outside ``scope``; whatever ``change`` raises to refuse.
            StoreUnavailable: the commit failed; nothing changed.
            VersionConflict: the version moved on every attempt; nothing changed.
        """
        for attempt in range(1, MAX_WRITE_ATTEMPTS + 1):
            before = self._current(scope)
            after_task = change(before.task)
            now = self.now_ms()
            if after_task == before.task and not also:
                return before
            try:
                stored = await self.store.apply(
                    TaskChange(before, after_task, now, also or (), fence)
                )
            except VersionConflict:
                if attempt == MAX_WRITE_ATTEMPTS:
                    raise
                self._conflicted(attempt)
                await self.catch_up(before.version + 1)
                continue
            self.stored = stored
            self._publish(before.task, after_task)
            return stored
        raise AssertionError("unreachable")  # the loop returns or raises

    def _conflicted(self, attempt: int) -> None:
        log.info(
            "task %s: written by another node; deciding again (attempt %d)",
            self.task_id,
            attempt + 1,
            extra={"event": "task_version_conflict", "taskId": self.task_id, "attempt": attempt},
        )

    async def catch_up(self, version: int) -> None:
        """Bring the snapshot to at least ``version`` (announced by another writer),
        publishing each committed version in order, as a local commit is published.
        A Task found terminal has its running turn on this node stopped.

        Nothing happens when the snapshot is already that new (no store read). A Task
        found gone keeps its last snapshot.

        Raises:
            StoreUnavailable: the store cannot be read (the snapshot is unchanged).
        """
        stored = self.stored
        if stored is None or stored.version >= version:
            return
        for newer in await self.history.versions_after(self.task_id, stored.version):
            current = self.stored
            if current is None or newer.version <= current.version:
                continue
            self.stored = newer
            self._publish(current.task, newer.task, committed="elsewhere")
        if self._stop_turn is not None and not stored.task.status.state.is_terminal:
            if self.finished:  # another node ended it: this node's turn must stop
                self._stop_turn(self.task_id)

    async def accept(
        self,
        act: Activation,
        locator: Locator,
        after_commit: Callable[[Accepted], None] | None = None,
    ) -> Accepted:
        """Accept a continuation of this Task (or find its duplicate) and publish it.

        ``after_commit`` (the wake notification) runs right after the COMMIT even if
        this owner or its caller is cancelled meanwhile. A continuation that found the
        Task's version moved recorded nothing: the owner catches up and the
        acceptance runs again, as :meth:`mutate` retries.

        Raises:
            VersionConflict: the version moved on every attempt; nothing recorded.
        """
        for attempt in range(1, MAX_WRITE_ATTEMPTS + 1):
            before = self._current(act.scope)
            try:
                result = await self.store.accept(
                    act, locator, self.now_ms(), after_commit=after_commit
                )
            except VersionConflict:
                if attempt == MAX_WRITE_ATTEMPTS:
                    raise
                self._conflicted(attempt)
                await self.catch_up(before.version + 1)
                continue
            if result.disposition == "continued" and result.stored is not None:
                await self._show_continuation(before, result.stored)
            return result
        raise AssertionError("unreachable")  # the loop returns or raises

    async def _show_continuation(self, before: StoredTask, stored: StoredTask) -> None:
        """Make the continuation just committed (``stored``) the snapshot and publish
        it; versions another node committed in between are published first, in order."""
        if stored.version > before.version + 1:
            try:
                await self.catch_up(stored.version)
            except StoreUnavailable:
                pass  # shown below as one step from the snapshot
        current = self.stored or before
        if stored.version > current.version:
            self.stored = stored
            self._publish(current.task, stored.task)

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

    def _publish(self, before: Task, after: Task, *, committed: str = "here") -> None:
        """Show ``after`` to the subscribers; ``committed`` says where the change was
        committed: ``"here"`` (logged ``task_state_changed`` at info) or
        ``"elsewhere"`` (another node's commit this owner caught up on: the same
        event at debug, so a change is logged once at info across the nodes)."""
        if before.status.state is not after.status.state:
            log.log(
                logging.INFO if committed == "here" else logging.DEBUG,
                "task %s: %s -> %s%s",
                after.id,
                before.status.state.name,
                after.status.state.name,
                "" if committed == "here" else " (committed by another node)",
                extra={
                    "event": "task_state_changed",
                    "taskId": after.id,
                    "contextId": after.context_id,
                    "from": before.status.state.name,
                    "to": after.status.state.name,
                    "committed": committed,
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
