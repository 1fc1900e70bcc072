"""The task plane as the HTTP layer sees it: every operation is a request to an actor.

Reads go to the store actor (durable state is the record, design rules "Recovery
uses durable state"); changes and subscriptions go to owner(T); sends go to intake.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import datetime

import attrs
import trio

from taskplane.actors.intake import IntakeActor
from taskplane.actors.outbound import Outbound
from taskplane.actors.owner_client import OwnerClient
from taskplane.actors.registry import OwnerRegistry
from taskplane.actors.wake import WakeActor
from taskplane.errors import Overloaded
from taskplane.model.enums import TaskState
from taskplane.model.types import Message, Part, StreamResponse, Task
from taskplane.scope import Scope
from taskplane.store.contract import TaskStore
from taskplane.store.records import Accepted, TaskPage, TaskQuery

CROWDED_WAITERS = 32
"""Sends waiting in intake for a wake slot from which new work waits at the HTTP edge
instead: a few waiting in intake (a busy but not overloaded server) is cheaper than
the edge's extra parse and hand-off; many is what clients ignoring ``Retry-After``
produce."""


@attrs.define(eq=False)
class TaskPlane:
    """Facade over the actors for one server. Safe to share between handlers.

    Cancellation (every coroutine): cancelling a caller drops only its answer. A send
    or cancel already handed to its actor still takes effect (and a committed change
    stays committed); a read or subscription simply stops.
    """

    store: TaskStore
    registry: OwnerRegistry
    owners: OwnerClient
    intake: IntakeActor
    wake: WakeActor
    outbound: Outbound
    now_ms: Callable[[], int]

    async def send(
        self, scope: Scope, message: Message, activated_extensions: Sequence[str]
    ) -> Accepted:
        """Accept one A2A send (see :meth:`taskplane.actors.intake.Intake.accept`)."""
        act = self.intake.intake.activation(scope, message, activated_extensions)
        return await self.intake.submit(act)

    def refusal_at_once(self, scope: Scope, message: Message) -> Overloaded | None:
        """The 503 a send of ``message`` by ``scope`` gets without waiting, or ``None``.

        An error only while the wake queue is full and for certainly new work (see
        :meth:`taskplane.actors.intake.Intake.certainly_new_send`); a possible
        duplicate or a direct reply is never refused here. Synchronous, no I/O.
        """
        intake = self.intake.intake
        if intake.queue_full and intake.certainly_new_send(scope, message):
            return intake.queue_full_error()
        return None

    async def wait_for_room(self, timeout_s: float) -> bool:
        """Wait (parked) until the wake queue has a free waiting slot, at most
        ``timeout_s`` seconds; ``False`` at the deadline or at once when as many
        senders as allowed already wait. Reserves nothing: the send that follows
        reserves its slot in intake as usual. Cancelling stops the wait."""
        reservation = await self.intake.intake.wake.reserve_within(timeout_s)
        if reservation is None:
            return False
        reservation.release()
        return True

    @property
    def queue_full(self) -> bool:
        """The wake queue is full: new work is refused or waits for a slot."""
        return self.intake.intake.queue_full

    @property
    def crowded(self) -> bool:
        """The wake queue is full and at least ``CROWDED_WAITERS`` sends already wait
        in intake for a slot: more new work should wait at the HTTP edge, where it
        costs no CPU (see :mod:`taskplane.http.early_refusal`)."""
        intake = self.intake.intake
        return intake.queue_full and intake.wake.admission_waiters >= CROWDED_WAITERS

    @property
    def admission_closed(self) -> bool:
        """New work is refused at once (see ``Intake.admission_closed``)."""
        return self.intake.intake.admission_closed

    async def ingest(
        self,
        scope: Scope,
        source: str,
        event_identity: str,
        conversation_key: str | None,
        parts: Sequence[Part],
        *,
        context_id: str | None = None,
        reply_to: str | None = None,
    ) -> Accepted:
        """Accept one native source event through the trusted sink.

        See :meth:`taskplane.actors.intake.Intake.native_activation`. A source may
        advance its checkpoint or acknowledge the provider only after this returns.
        """
        act = self.intake.intake.native_activation(
            scope,
            source,
            event_identity,
            conversation_key,
            parts,
            context_id=context_id,
            reply_to=reply_to,
        )
        return await self.intake.submit(act)

    async def record_reply_anchor(
        self, scope: Scope, source: str, provider_response_id: str, task_id: str
    ) -> None:
        """Remember that the provider response ``provider_response_id`` (sent by a source
        for ``task_id``) may be replied to directly (conditions 2 and 3)."""
        await self.store.record_anchor(scope, source, provider_response_id, task_id, self.now_ms())

    async def get_task(self, scope: Scope, task_id: str) -> Task:
        """The durable Task. Raises TaskNotFound outside ``scope``."""
        stored = await self.store.load_task(scope, task_id)
        return stored.task

    async def list_tasks(
        self,
        scope: Scope,
        *,
        context_id: str | None,
        state: TaskState | None,
        status_after: datetime | None,
        page_size: int,
        page_token: str | None,
    ) -> TaskPage:
        """One page of ``scope``'s Tasks, newest status first."""
        query = TaskQuery(scope, context_id, state, status_after, page_size, page_token)
        return await self.store.list_tasks(query)

    async def cancel(self, scope: Scope, task_id: str) -> Task:
        """Move a non-terminal Task to CANCELED and stop its running turn at once.

        owner(T) stops the turn right after the commit, so a caller that hangs up
        while waiting for the answer still gets the turn stopped.
        Raises:
            TaskNotFound: outside ``scope``.
            TaskNotCancelable: already terminal.
        """
        return await self.owners.cancel(task_id, scope)

    async def subscribe(
        self, scope: Scope, task_id: str
    ) -> trio.MemoryReceiveChannel[StreamResponse]:
        """Frames of ``task_id``: the snapshot first, then each committed change.

        Raises TaskNotFound outside ``scope``.
        """
        return await self.owners.subscribe(task_id, scope)

    async def wait_settled(self, scope: Scope, task_id: str, timeout_s: float) -> Task:
        """Wait until the Task is terminal or interrupted, at most ``timeout_s`` seconds.

        Returns the durable Task either way (design rule "A blocking send is
        bounded": at the timeout the current snapshot is returned). The settled Task
        comes from owner(T)'s committed snapshots, without a store read.
        """
        frames = await self.owners.subscribe(task_id, scope, snapshots=True)
        task: Task | None = None
        with frames, trio.move_on_after(timeout_s if timeout_s > 0 else math.inf):
            async for frame in frames:
                task = frame.task
                if task is not None and task.status.state.is_settled:
                    return task
        # The timeout, or the stream ended early (owner restarted): read the store.
        return await self.get_task(scope, task_id)

