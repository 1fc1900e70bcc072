"""Owner registry: taskId -> owner(T) inbox; starts owners on demand, forgets retired ones.

The context half of the registry (the atomic ``(tenant, principal, source,
conversationKey) -> contextId`` upsert) is a statement inside the acceptance
transaction (:meth:`taskplane.store.contract.TaskStore.accept`), so concurrent first messages
resolve one contextId without a second hop.

Lookups and retirement are synchronous methods on the trio thread: between looking
an owner up and putting a request in its inbox (``send_nowait``) there is no
checkpoint, so an owner can never retire with a request on its way to it. Each
owner runs under its own one-for-one supervisor (transient: a retired owner is not
restarted, a crashed one is, from durable state, with its inbox intact (rule "inboxes
outlive restarts").
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

import attrs
import outcome
import trio

from taskplane.actors import owner_inbox
from taskplane.actors.owner import TaskHistory, TaskOwner
from taskplane.actors.owner_messages import CatchUp, OwnerMessage
from taskplane.actors.turns import RunningTurns
from taskplane.errors import Overloaded
from taskplane.mailbox import CrashHook, handling, no_crash, refuse_waiting
from taskplane.store.contract import TaskStore
from taskplane.store.records import StoredTask
from taskplane.supervision import ChildSpec, RestartIntensityExceeded, RestartPolicy, supervise

log = logging.getLogger("taskplane.actors.registry")

OWNER_INBOX_SIZE = 64
"""Requests waiting for one owner before callers get 503 Overloaded."""
OWNER_IDLE_S = 30.0
"""Seconds an owner with no subscribers and no requests stays before retiring."""
OWNER_POLICY = RestartPolicy(max_restarts=3, period_s=10.0)


@attrs.define
class _Handle:
    tx: trio.MemorySendChannel[OwnerMessage]
    rx: trio.MemoryReceiveChannel[OwnerMessage]
    owner: TaskOwner | None = None
    incarnations: int = 0
    adopted: StoredTask | None = None
    """The committed snapshot the first incarnation starts from instead of reading
    the store (see :meth:`OwnerRegistry.adopt`)."""


@attrs.frozen
class OwnerRegistryStatistics:
    """A snapshot of the owners (read by metrics and tests).

    Attributes:
        owners: owners alive now (memory grows with this, not with stored Tasks).
        started: owners started since the registry was made.
        restarts: owner incarnations started after a crash.
        queued_messages: messages waiting in all owners' inboxes.
        subscribers: open subscriptions (SSE streams, blocking sends) over all owners.
    """

    owners: int
    started: int
    restarts: int
    queued_messages: int
    subscribers: int


class OwnerRegistry:
    """Finds or starts owner(T) and sends it requests.

    Args:
        nursery: where owners run (the owners' supervisor nursery).
        store: the task store, handed to each owner.
        now_ms: wall clock in ms (a parameter for tests).
        turns: the running turns, so a committed cancel stops its Task's turn.
        crash_hook: restart drills' crash button (production: never crashes).
        history: where owners read versions other nodes committed (a shared store's
            change records; default: the store's Task row).
    """

    def __init__(
        self,
        nursery: trio.Nursery,
        store: TaskStore,
        now_ms: Callable[[], int],
        turns: RunningTurns,
        crash_hook: CrashHook = no_crash,
        history: TaskHistory | None = None,
    ) -> None:
        self.crash_hook = crash_hook
        self._history = history
        self._nursery = nursery
        self._store = store
        self.now_ms = now_ms
        self._turns = turns
        self._owners: dict[str, _Handle] = {}
        self.started_count = 0
        self._restarts = 0

    def __len__(self) -> int:
        """Owners currently alive (memory grows with this, not with stored Tasks)."""
        return len(self._owners)

    def statistics(self) -> OwnerRegistryStatistics:
        """Counts of owners, their queued messages and subscribers (synchronous)."""
        handles = list(self._owners.values())
        return OwnerRegistryStatistics(
            owners=len(handles),
            started=self.started_count,
            restarts=self._restarts,
            queued_messages=sum(h.rx.statistics().current_buffer_used for h in handles),
            subscribers=sum(h.owner.subscriber_count for h in handles if h.owner is not None),
        )

    def post(self, task_id: str, message: OwnerMessage) -> None:
        """Put ``message`` in owner(task_id)'s inbox, starting the owner if needed.

        Synchronous (never waits): use :class:`~taskplane.actors.owner_client.OwnerClient`
        to send a message and await its reply.
        Raises:
            Overloaded: that owner's inbox is full (503, retry); nothing was posted.
        """
        handle = self._handle(task_id)
        try:
            handle.tx.send_nowait(message)
        except trio.WouldBlock:
            raise Overloaded(f"task {task_id} has too many requests in flight") from None

    def announce(self, task_id: str, version: int) -> bool:
        """Another node committed ``version`` of ``task_id``: tell owner(task_id) to
        catch up, if it runs here and its snapshot is older (synchronous, never waits;
        a full inbox drops the news, which the next poll brings again).

        Returns ``True`` when a catch-up was posted.
        """
        handle = self._owners.get(task_id)
        if handle is None or handle.owner is None:
            return False
        stored = handle.owner.stored
        if stored is None or stored.version >= version:
            return False
        reply_tx, reply_rx = trio.open_memory_channel[outcome.Outcome[None]](1)
        reply_rx.close()  # nobody waits for the answer
        try:
            handle.tx.send_nowait(CatchUp(version, reply_tx))
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            reply_tx.close()
            return False
        return True

    def watched(self) -> dict[str, int]:
        """Task id -> snapshot version of each live owner whose Task may still change
        (the Tasks whose news this node must hear)."""
        return {
            task_id: h.owner.stored.version
            for task_id, h in self._owners.items()
            if h.owner is not None and h.owner.stored is not None and not h.owner.finished
        }

    def adopt(self, stored: StoredTask) -> None:
        """Start owner(T) for a Task just created, from ``stored``, without a store read.

        Call it right after the COMMIT that created the Task, on the trio thread and
        before any checkpoint (the store's after-commit hook): nothing else can have
        changed the Task yet, since every later change goes through owner(T)
        ("Durable first, then visible"). Does nothing if owner(T) already runs. A
        restarted owner reads the store as always.
        """
        if stored.task.id not in self._owners:
            self._handle(stored.task.id, adopted=stored)

    def _handle(self, task_id: str, adopted: StoredTask | None = None) -> _Handle:
        handle = self._owners.get(task_id)
        if handle is None:
            tx, rx = trio.open_memory_channel[OwnerMessage](OWNER_INBOX_SIZE)
            handle = self._owners[task_id] = _Handle(tx, rx, adopted=adopted)
            self.started_count += 1
            self._nursery.start_soon(self._supervise_owner, task_id, handle)
        return handle

    def _try_retire(self, task_id: str, handle: _Handle) -> bool:
        """Forget owner(task_id) if nothing waits in its inbox (synchronous: atomic)."""
        if handle.rx.statistics().current_buffer_used:
            return False
        if self._owners.get(task_id) is handle:
            del self._owners[task_id]
        handle.tx.close()
        return True

    async def _supervise_owner(self, task_id: str, handle: _Handle) -> None:
        spec = ChildSpec(name=f"owner:{task_id}", start=partial(self._run_owner, task_id, handle))
        try:
            await supervise(spec, OWNER_POLICY)
        except RestartIntensityExceeded:
            log.error(
                "owner of task %s keeps crashing; dropping it",
                task_id,
                extra={"event": "owner_abandoned", "taskId": task_id},
            )
        except Exception:
            # The first incarnation failed to start (e.g. the store was unavailable while
            # loading the Task): drop this owner; its waiting callers get ActorGone and
            # the next request starts a fresh one. Never take the plane down for it.
            log.exception(
                "owner of task %s failed to start",
                task_id,
                extra={"event": "owner_start_failed", "taskId": task_id},
            )
        finally:
            if self._owners.get(task_id) is handle:
                del self._owners[task_id]
            handle.tx.close()
            refuse_waiting(handle.rx)

    async def _run_owner(
        self,
        task_id: str,
        handle: _Handle,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        owner = TaskOwner(
            task_id, self._store, self.now_ms, self._history, stop_turn=self._turns.interrupt
        )
        handle.incarnations += 1
        if handle.incarnations > 1:
            self._restarts += 1
        inbox = handle.rx.clone()
        try:
            async with inbox:
                adopted, handle.adopted = handle.adopted, None
                await owner.load(adopted)
                handle.owner = owner
                task_status.started()
                while True:
                    message = await self._next_message(task_id, handle, owner, inbox)
                    if message is None:
                        return
                    with handling(message):
                        self.crash_hook("owner")
                        await owner_inbox.handle(owner, message, self._turns)
        finally:
            handle.owner = None
            owner.close_subscribers()

    async def _next_message(
        self,
        task_id: str,
        handle: _Handle,
        owner: TaskOwner,
        inbox: trio.MemoryReceiveChannel[OwnerMessage],
    ) -> OwnerMessage | None:
        """The next message, or ``None`` once the owner has retired."""
        while True:
            try:
                return inbox.receive_nowait()
            except trio.WouldBlock:
                pass
            except trio.EndOfChannel:
                return None
            if owner.finished and owner.idle and self._try_retire(task_id, handle):
                return None
            with trio.move_on_after(OWNER_IDLE_S) as idle:
                try:
                    return await inbox.receive()
                except trio.EndOfChannel:
                    return None
            if (
                idle.cancelled_caught
                and owner.idle
                and task_id not in self._turns  # a cancel elsewhere must reach its turn
                and self._try_retire(task_id, handle)
            ):
                return None
