"""The task plane as the HTTP layer sees it: every operation is a request to an actor.

Reads go to the store actor (durable state is the record, design rules "Recovery
uses durable state"); changes and subscriptions go to owner(T); sends go to intake.
Whether there is room for new work is :attr:`TaskPlane.admission`'s to say (design
rule "Wake admission is bounded").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Literal

import attrs
import trio

from taskplane.actors.admission_contract import AdmissionGate
from taskplane.actors.intake import IntakeActor
from taskplane.actors.outbound import Outbound
from taskplane.actors.owner_client import OwnerClient
from taskplane.actors.registry import OwnerRegistry
from taskplane.actors.wake import WakeActor
from taskplane.errors import StoreUnavailable
from taskplane.model.enums import TaskState
from taskplane.model.types import Message, Part, StreamResponse, Task
from taskplane.scope import Scope
from taskplane.store.contract import TaskStore
from taskplane.store.records import Accepted, TaskPage, TaskQuery


@attrs.frozen
class SendOutcome:
    """What one accepted send or native event came to, as the plane's callers see it.

    Attributes:
        disposition: ``"created"`` (a new Task), ``"continued"`` (a message to an
            existing Task) or ``"duplicate"`` (a message already accepted: its prior
            outcome again, rule "Idempotent intake").
        activation_id: the activation recorded for the send (the prior one for a
            duplicate).
        task: the Task created or continued; ``None`` exactly when ``reply`` is set.
        reply: the agent's direct Message answer (no Task), else ``None``.
    """

    disposition: Literal["created", "continued", "duplicate"]
    activation_id: str
    task: Task | None = None
    reply: Message | None = None

    @classmethod
    def of(cls, accepted: Accepted) -> SendOutcome:
        """The outcome of intake's answer (its stored record stays in the actors)."""
        return cls(accepted.disposition, accepted.activation_id, accepted.task, accepted.reply)


@attrs.frozen
class TaskListPage:
    """One ListTasks page.

    Attributes:
        tasks: the Tasks, newest status first.
        next_page_token: the cursor of the next page; ``""`` on the last page.
        total_size: how many Tasks match the filters, over all pages.
    """

    tasks: tuple[Task, ...]
    next_page_token: str
    total_size: int

    @classmethod
    def of(cls, page: TaskPage) -> TaskListPage:
        """The page as the store read it."""
        return cls(page.tasks, page.next_page_token, page.total_size)


@attrs.define(eq=False)
class TaskPlane:
    """Facade over the actors for one server. Safe to share between handlers.

    Cancellation (every coroutine): cancelling a caller drops only its answer. A send
    or cancel already handed to its actor still takes effect (and a committed change
    stays committed); a read or subscription simply stops.

    ``admission`` (default: the wake actor's) is what the HTTP edge asks before it
    parses a send (:class:`~taskplane.actors.admission_contract.AdmissionGate`).
    ``page_key``: see the attribute.
    """

    store: TaskStore
    registry: OwnerRegistry
    owners: OwnerClient
    intake: IntakeActor
    wake: WakeActor
    outbound: Outbound
    now_ms: Callable[[], int]
    admission: AdmissionGate = attrs.field(
        default=attrs.Factory(lambda self: self.wake.admission, takes_self=True)
    )
    page_key: bytes | None = None
    """The key ``GET /tasks`` page tokens are signed with: the database's on a store
    shared by several nodes (page 2 may be asked of any node); ``None``: a fresh key
    per process."""

    async def send(
        self, scope: Scope, message: Message, activated_extensions: Sequence[str]
    ) -> SendOutcome:
        """Accept one A2A send (see :meth:`taskplane.actors.intake.Intake.accept`)."""
        return SendOutcome.of(await self.intake.send(scope, message, activated_extensions))

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
    ) -> SendOutcome:
        """Accept one native source event through the trusted sink.

        See :meth:`taskplane.actors.intake.Intake.native_activation`. A source may
        advance its checkpoint or acknowledge the provider only after this returns.
        """
        accepted = await self.intake.ingest(
            scope,
            source,
            event_identity,
            conversation_key,
            parts,
            context_id=context_id,
            reply_to=reply_to,
        )
        return SendOutcome.of(accepted)

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
    ) -> TaskListPage:
        """One page of ``scope``'s Tasks, newest status first."""
        query = TaskQuery(scope, context_id, state, status_after, page_size, page_token)
        return TaskListPage.of(await self.store.list_tasks(query))

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

        Raises:
            StoreUnavailable: a store write failed to commit while waiting (disk full,
                I/O error): the Task cannot progress until writes commit again, so
                the wait ends at once (design rule "Readiness tells the truth")
                instead of at the timeout.
        """
        frames = await self.owners.subscribe(task_id, scope, snapshots=True)
        failure: str | None = None
        with frames, trio.move_on_after(timeout_s if timeout_s > 0 else math.inf):
            async with trio.open_nursery() as nursery:

                async def watch_commits() -> None:
                    nonlocal failure
                    failure = await self.store.commit_failed()
                    nursery.cancel_scope.cancel()

                nursery.start_soon(watch_commits)
                async for frame in frames:
                    task = frame.task
                    if task is not None and task.status.state.is_settled:
                        nursery.cancel_scope.cancel()
                        return task
                nursery.cancel_scope.cancel()
        if failure is not None:
            raise StoreUnavailable(
                f"task {task_id} was accepted, but its progress cannot be recorded: "
                f"{failure}; read the Task later (GET /tasks/{task_id})"
            )
        # The timeout, or the stream ended early (owner restarted): read the store.
        return await self.get_task(scope, task_id)
