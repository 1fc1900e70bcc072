"""Intake: the trusted task-plane sink for A2A sends and native-source events.

A send is deduplicated by (tenant, principal, source, messageId), routed to a direct
reply (the executor's Message-versus-Task decision), to owner(T) (an explicit
``taskId`` continuation, authorized by ownership before anything is written), or to a
new Task; it is committed in one acceptance transaction; only then is the wake queue
told (docs/architecture.md, "One request: a blocking message:send that creates a Task").

Intake runs each send as its own task in the intake actor's nursery, bounded by
``INTAKE_CONCURRENCY``; requests beyond ``INTAKE_INBOX_SIZE`` waiting are refused with
503 at the edge (rule "bounded inboxes"). Concurrent acceptances meet in the store actor, which
serializes them (so concurrent identical sends mint one Task) and groups their commits.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import attrs
import trio

from taskplane.actors import logic
from taskplane.actors.claim_filter import ClaimIndex, build_filter
from taskplane.actors.owner_client import OwnerClient
from taskplane.actors.protocol import CrashHook, ReplyTo, answer, ask, handling, no_crash
from taskplane.actors.wake import WakeActor
from taskplane.actors.wake_queue import Reservation, Wake
from taskplane.bridge.runtime import AgentRuntime
from taskplane.errors import Overloaded, TaskplaneError
from taskplane.model.enums import Role
from taskplane.model.types import Message, Part
from taskplane.scope import Scope
from taskplane.store.contract import TaskStore
from taskplane.store.records import A2A_SOURCE, Accepted, Activation, Locator, provider_key

log = logging.getLogger("taskplane.actors.intake")

INTAKE_INBOX_SIZE = 512
INTAKE_CONCURRENCY = 256


@attrs.define(eq=False)
class Intake:
    """State of the intake actor.

    Attributes:
        store, owners, wake, runtime: the actors it talks to.
        locator: this interface's ``outfitter-task/v1`` locator parts.
        now_ms: wall clock in ms (a parameter for tests).
        claims: which dedupe identities may have been claimed (refusals under a full
            wake queue skip the store for certainly new work).
    """

    store: TaskStore
    owners: OwnerClient
    wake: WakeActor
    runtime: AgentRuntime
    locator: Locator
    now_ms: Callable[[], int]
    claims: ClaimIndex = attrs.field(factory=ClaimIndex)

    def activation(
        self, scope: Scope, message: Message, activated_extensions: Sequence[str]
    ) -> Activation:
        """The :class:`Activation` of an A2A send (activated extensions recorded on it)."""
        extensions = tuple(dict.fromkeys((*message.extensions, *activated_extensions)))
        return Activation(
            scope=scope,
            source=A2A_SOURCE,
            dedupe_key=message.message_id,
            digest=logic.activation_digest(message, activated_extensions),
            message=attrs.evolve(message, extensions=extensions),
            explicit_task_id=message.task_id,
            requested_context_id=message.context_id,
            conversation_key=None,
            minted_task_id=logic.new_id(),
            minted_context_id=logic.new_id(),
            received_at_ms=self.now_ms(),
        )

    def native_activation(
        self,
        scope: Scope,
        source: str,
        event_identity: str,
        conversation_key: str | None,
        parts: Sequence[Part],
        *,
        context_id: str | None = None,
        reply_to: str | None = None,
    ) -> Activation:
        """The :class:`Activation` of a native source event (the trusted sink).

        Args:
            source: the source name (``"slack"``, ``"spool"``...), never ``"a2a"``.
            event_identity: the source's event identity (conformance matrix); it is
                the dedupe key, scoped to ``scope``'s principal.
            conversation_key: the source's conversation fields, or ``None`` (a fresh
                context for every event).
            context_id: the trusted interface's ``createTask(principal, contextId)``:
                a new Task in this existing context, if ``scope`` owns it.
            reply_to: the provider message this event directly replies to; a verified
                reply anchor there continues the waiting Task.
        A native event never continues a Task by ID: any ``taskId`` inside ``parts``
        is untrusted text (design rule "Channels never parses a taskId out of a
        provider message body").
        """
        if source == A2A_SOURCE:
            raise ValueError("native intake cannot use the a2a source name")
        message = Message(message_id=event_identity, role=Role.ROLE_USER, parts=tuple(parts))
        return Activation(
            scope=scope,
            source=source,
            dedupe_key=event_identity,
            digest=logic.activation_digest(message, ()),
            message=message,
            explicit_task_id=None,
            requested_context_id=context_id,
            conversation_key=conversation_key,
            minted_task_id=logic.new_id(),
            minted_context_id=logic.new_id(),
            received_at_ms=self.now_ms(),
            reply_to=reply_to,
        )

    async def accept(self, act: Activation) -> Accepted:
        """Accept ``act``: the prior outcome, a direct reply, a continuation or a new Task.

        Raises:
            DuplicateMessageId, TaskNotFound, InvalidRequest, UnsupportedOperation,
            StoreUnavailable: nothing was recorded.
        """
        # Every op below checks the dedupe identity first, in its own transaction, so a
        # duplicate returns the prior outcome whichever path it takes.
        if act.explicit_task_id is None and act.source == A2A_SOURCE:
            parts = self.runtime.triage(act.message)
            if parts is not None:
                now = self.now_ms()
                reply = Message(message_id=logic.new_id(), role=Role.ROLE_AGENT, parts=tuple(parts))
                direct = await self.store.accept_direct(act, reply, now)
                if direct.disposition != "duplicate":
                    self.claims.note(act.provider_key)
                return direct
        reservation = self.wake.reserve()
        if reservation is None:
            # The agent's queue is full: answer a duplicate as usual, refuse new work
            # (503, nothing recorded) rather than accept a Task that could not run.
            # Certainly new work skips the store; new work waits a little for a slot.
            if self.claims.may_be_claimed(act.provider_key):
                prior = await self.store.find_duplicate(act)
                if prior is not None:
                    return prior
            reservation = await self.wake.reserve_within()
            if reservation is None:
                raise self.queue_full_error()
        try:
            return await self._commit(act, reservation)
        finally:
            reservation.release()  # unless the acceptance's wake used it
            self.wake.signal_room()

    def queue_full_error(self) -> Overloaded:
        """The 503 for new work while the wake queue is full."""
        return Overloaded(
            f"the agent has {self.wake.queue.limit} tasks waiting; retry shortly",
            retry_after_s=1,
        )

    @property
    def queue_full(self) -> bool:
        """Every waiting slot of the wake queue is taken (new work cannot join it now)."""
        queue = self.wake.queue
        return queue.waiting >= queue.limit

    @property
    def admission_closed(self) -> bool:
        """New work is refused at once: the wake queue is full and as many senders as
        allowed already wait for a slot (synchronous, no I/O)."""
        return self.queue_full and self.wake.admission_waiters_full

    def refuses_at_once(self, act: Activation) -> bool:
        """``act`` is new work that a full wake queue refuses without waiting.

        Cheap (no store, no await): admission is closed (:attr:`admission_closed`),
        ``act`` is not answered with a direct reply (``triage``), and its identity was
        certainly never claimed. Such a send is refused before it reaches the intake
        actor, so refusing costs far less than accepting and never queues store work
        in front of the agent's turns ("Wake admission is bounded").
        """
        if not self.admission_closed:
            return False
        if act.explicit_task_id is None and act.source == A2A_SOURCE:
            if self.runtime.triage(act.message) is not None:
                return False
        return not self.claims.may_be_claimed(act.provider_key)

    def certainly_new_send(self, scope: Scope, message: Message) -> bool:
        """An A2A send of ``message`` by ``scope`` is certainly new work for the agent:
        it is not answered with a direct reply (``triage``) and its messageId was
        certainly never claimed by ``scope`` (so it is no duplicate). Cheap: no store,
        no await; ``False`` when unsure."""
        if message.task_id is None and self.runtime.triage(message) is not None:
            return False
        key = provider_key(scope.tenant, scope.principal, A2A_SOURCE, message.message_id)
        return not self.claims.may_be_claimed(key)

    async def load_claims(self) -> None:
        """Build the claim index from every CLAIM in the store (one store op)."""
        self.claims.begin_load()
        try:
            loaded = await self.store.scan_claims(build_filter)
        except TaskplaneError as exc:  # the store asks for every refusal meanwhile
            self.claims.abandon_load()
            log.warning(
                "claim index not loaded: %s", exc, extra={"event": "claim_index_unavailable"}
            )
            return
        self.claims.install(loaded)

    async def _commit(self, act: Activation, reservation: Reservation) -> Accepted:
        def notify(accepted: Accepted) -> None:
            if accepted.disposition != "duplicate":
                self.claims.note(act.provider_key)
            self._notify(accepted, reservation)

        task_id = act.explicit_task_id
        if task_id is None and act.reply_to is not None:
            task_id = await self.store.anchor_target(act)
        if task_id is None:
            return await self.store.accept(act, self.locator, self.now_ms(), after_commit=notify)

        return await self.owners.continue_task(task_id, act, self.locator, notify)

    def _notify(self, accepted: Accepted, reservation: Reservation) -> None:
        """Offer the wake of a new acceptance, or of a duplicate whose wake was lost.

        Runs right after the commit (the store's ``after_commit`` hook), so a crash of intake or
        of the caller between the commit and this call cannot lose the wake. A created
        Task's owner starts from the committed snapshot, and a new activation's wake
        carries its Task's source, so neither reads the store again.
        """
        stored = accepted.stored
        if stored is None:
            return
        if accepted.disposition == "created":
            self.owners.adopt(stored)
        if accepted.disposition != "duplicate":
            wake = Wake(
                accepted.activation_id, stored.task.id, stored.task.context_id, stored.source
            )
            self.wake.offer(wake, reservation)
        elif accepted.pending_wake:
            self.wake.offer(
                Wake(accepted.activation_id, stored.task.id, stored.task.context_id), reservation
            )


@attrs.frozen(eq=False)
class Accept:
    """Intake's one message: accept ``activation`` and reply with its :class:`Accepted`."""

    activation: Activation
    reply: ReplyTo[Accepted]


@attrs.frozen
class IntakeStatistics:
    """A snapshot of intake (read by metrics and tests).

    Attributes:
        queued: sends waiting in the inbox (at most ``INTAKE_INBOX_SIZE``).
        in_flight: sends being accepted now (at most ``INTAKE_CONCURRENCY``).
        refused: sends refused with 503 because the inbox was full, since start.
    """

    queued: int
    in_flight: int
    refused: int


class IntakeActor:
    """The intake actor's mailbox and loop.

    ``submit`` never waits for room: a full inbox is 503 Overloaded ("Backpressure at
    the edge").
    """

    def __init__(self, intake: Intake, crash_hook: CrashHook = no_crash) -> None:
        self.intake = intake
        self.crash_hook = crash_hook
        self._tx, self._rx = trio.open_memory_channel[Accept](INTAKE_INBOX_SIZE)
        self._limiter = trio.CapacityLimiter(INTAKE_CONCURRENCY)
        self._refused = 0

    def statistics(self) -> IntakeStatistics:
        """Inbox depth, sends in flight and refusals (synchronous)."""
        return IntakeStatistics(
            queued=self._rx.statistics().current_buffer_used,
            in_flight=self._limiter.borrowed_tokens,
            refused=self._refused,
        )

    def _post(self, message: Accept) -> None:
        try:
            self._tx.send_nowait(message)
        except trio.WouldBlock:
            self._refused += 1
            raise Overloaded("the server is accepting too many messages; retry shortly") from None

    async def submit(self, act: Activation) -> Accepted:
        """Hand ``act`` to intake and wait for its acceptance (see :meth:`Intake.accept`).

        Raises:
            Overloaded: the intake inbox is full, or the wake queue is full and ``act``
                is new work (see :meth:`Intake.refuses_at_once`); retry after 1 s;
                nothing was sent.
            ActorGone: intake stopped before answering.
        Cancellation: once handed over, the acceptance still runs and may commit; a
        retry of the same send then gets the prior outcome (idempotency).
        """
        if self.intake.refuses_at_once(act):
            raise self.intake.queue_full_error()
        return await ask(self._post, lambda reply: Accept(act, reply), "intake")

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Replay eligible wakes, then serve the inbox; each send runs concurrently,
        at most INTAKE_CONCURRENCY at a time. Calls ``task_status.started()`` after
        the replay. Runs until cancelled."""
        inbox = self._rx.clone()
        async with inbox, trio.open_nursery() as nursery:
            # Accepted activations whose wake a crash may have lost are offered again
            # (idempotent: a wake already pending or offered is ignored).
            replayed = await self.intake.wake.replay()
            log.info(
                "%d wakes replayed", replayed, extra={"event": "wakes_replayed", "count": replayed}
            )
            task_status.started()
            nursery.start_soon(self.intake.load_claims)
            message: Accept
            async for message in inbox:
                with handling(message):
                    self.crash_hook("intake")
                    await self._limiter.acquire_on_behalf_of(message)
                nursery.start_soon(self._serve, message)

    async def _serve(self, message: Accept) -> None:
        try:
            with handling(message):
                await answer(message.reply, self.intake.accept(message.activation))
        finally:
            self._limiter.release_on_behalf_of(message)
