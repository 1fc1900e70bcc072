"""Intake: the trusted task-plane sink for A2A sends and native-source events.

A send is deduplicated by (tenant, principal, source, messageId), routed to a direct
reply (the executor's Message-versus-Task decision), to owner(T) (an explicit
``taskId`` continuation, authorized by ownership before anything is written), or to a
new Task; it is committed in one acceptance transaction; only then is the wake queue
told (docs/architecture.md, "One request: a blocking message:send that creates a Task").

Each send asks admission once (:meth:`IntakeActor.submit`, design rule "Wake
admission is bounded"): its :class:`~taskplane.actors.admission_contract.Verdict`,
with the executor's ``triage``, is made there and carried to :meth:`Intake.accept`.

Intake runs each send as its own task in the intake actor's nursery, bounded by
``INTAKE_CONCURRENCY``; requests beyond ``INTAKE_INBOX_SIZE`` waiting are refused with
503 at the edge (every inbox is bounded). Concurrent acceptances meet in the store
actor, which serializes them (so concurrent identical sends mint one Task) and groups
their commits.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import attrs
import trio

from taskplane.actors import logic
from taskplane.actors.admission_contract import IntakeGate, Verdict
from taskplane.actors.admission_limits import INTAKE_CONCURRENCY, INTAKE_INBOX_SIZE
from taskplane.actors.owner_client import OwnerClient
from taskplane.actors.wake import WakeActor
from taskplane.actors.wake_queue import Reservation, Wake
from taskplane.bridge.triage import DirectReplies
from taskplane.errors import Overloaded
from taskplane.mailbox import CrashHook, ReplyTo, answer, ask, handling, no_crash
from taskplane.model.enums import Role
from taskplane.model.types import Message, Part
from taskplane.scope import Scope
from taskplane.store.contract import TaskStore
from taskplane.store.records import A2A_SOURCE, Accepted, Activation, Locator

log = logging.getLogger("taskplane.actors.intake")


@attrs.define(eq=False)
class Intake:
    """State of the intake actor.

    Attributes:
        store, owners, wake: the actors it talks to.
        locator: this interface's ``outfitter-task/v1`` locator parts.
        now_ms: wall clock in ms (a parameter for tests).
        admission: the wake queue's admission (default: the wake actor's); it makes
            each send's verdict, holds its slot and knows which identities may have
            been claimed.
    """

    store: TaskStore
    owners: OwnerClient
    wake: WakeActor
    locator: Locator
    now_ms: Callable[[], int]
    admission: IntakeGate = attrs.field(
        default=attrs.Factory(lambda self: self.wake.admission, takes_self=True)
    )

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

    def admit(self, act: Activation) -> Verdict:
        """Ask admission about ``act`` once: its :class:`Verdict` (one ``triage``).

        Raises:
            Overloaded: ``act`` is certainly new work and admission is closed (see
                :meth:`~taskplane.actors.admission.Admission.refusal_at_once`);
                nothing was recorded. Synchronous, no I/O.
        """
        verdict = self.admission.check(act.scope, act.message, act.source)
        refusal = self.admission.refusal_at_once(verdict)
        if refusal is not None:
            raise refusal
        return verdict

    async def accept(self, act: Activation, verdict: Verdict) -> Accepted:
        """Accept ``act``: the prior outcome, a direct reply, a continuation or a new Task.

        ``verdict`` is ``act``'s (from :meth:`admit`): its direct reply, if any, is
        the executor's decision already made. Otherwise a runtime with
        :class:`~taskplane.bridge.triage.DirectReplies` is asked (bounded, default
        2 s) for a new A2A send without a ``taskId`` that is no duplicate.
        Raises:
            DuplicateMessageId, TaskNotFound, InvalidRequest, UnsupportedOperation,
            StoreUnavailable: nothing was recorded.
            Overloaded: the wake queue stayed full and ``act`` is new work.
        """
        # Every op below checks the dedupe identity first, in its own transaction, so a
        # duplicate returns the prior outcome whichever path it takes.
        admission = self.admission
        if verdict.reply is None and act.source == A2A_SOURCE and act.explicit_task_id is None:
            runtime = self.wake.runtime
            if isinstance(runtime, DirectReplies):
                # The agent's own (bounded) triage; a duplicate never asks it again.
                if admission.may_be_claimed(act.provider_key):
                    prior = await self.store.find_duplicate(act)
                    if prior is not None:
                        return prior
                parts = await runtime.reply_directly(act.message)
                if parts is not None:
                    verdict = attrs.evolve(verdict, reply=tuple(parts))
        if verdict.reply is not None:
            now = self.now_ms()
            reply = Message(message_id=logic.new_id(), role=Role.ROLE_AGENT, parts=verdict.reply)
            direct = await self.store.accept_direct(act, reply, now)
            if direct.disposition != "duplicate":
                admission.claimed(act.provider_key)
            return direct
        reservation = admission.reserve_now()
        if reservation is None:
            # The agent's queue is full: answer a duplicate as usual, refuse new work
            # (503, nothing recorded) rather than accept a Task that could not run.
            # Certainly new work skips the store; new work waits a little for a slot.
            if admission.may_be_claimed(act.provider_key):
                prior = await self.store.find_duplicate(act)
                if prior is not None:
                    return prior
            reservation = await admission.reserve()
            if reservation is None:
                raise admission.full_error()
        try:
            return await self._commit(act, reservation)
        finally:
            admission.release(reservation)  # unless the acceptance's wake used it

    async def _commit(self, act: Activation, reservation: Reservation) -> Accepted:
        def notify(accepted: Accepted) -> None:
            if accepted.disposition != "duplicate":
                self.admission.claimed(act.provider_key)
            self._notify(accepted, reservation)

        task_id = act.explicit_task_id
        if task_id is None and act.reply_to is not None:
            task_id = await self.store.anchor_target(act)
        if task_id is None:
            # Design rule "A wake waits for its node": a free turn slot here may let
            # the acceptance claim its new wake's turn itself.
            turn = self.wake.claim_at_acceptance(act.activation_id)
            try:
                return await self.store.accept(
                    act, self.locator, self.now_ms(), after_commit=notify, turn=turn
                )
            finally:
                if turn is not None:
                    self.wake.unclaimed(act.activation_id)  # unless its wake runs

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
                accepted.activation_id,
                stored.task.id,
                stored.task.context_id,
                stored.source,
                fence=accepted.fence,  # its turn already claimed by the acceptance
            )
            self.wake.offer(wake, reservation)
        elif accepted.pending_wake:
            self.wake.offer(
                Wake(accepted.activation_id, stored.task.id, stored.task.context_id), reservation
            )


@attrs.frozen(eq=False)
class Accept:
    """Intake's one message: accept ``activation`` (with its admission ``verdict``) and
    reply with its :class:`Accepted`."""

    activation: Activation
    verdict: Verdict
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
            Overloaded: the intake inbox is full, or admission is closed and ``act``
                is new work (see :meth:`Intake.admit`); retry after 1 s; nothing was
                sent.
            ActorGone: intake stopped before answering.
        Cancellation: once handed over, the acceptance still runs and may commit; a
        retry of the same send then gets the prior outcome (idempotency).
        """
        verdict = self.intake.admit(act)
        return await ask(self._post, lambda reply: Accept(act, verdict, reply), "intake")

    async def send(
        self, scope: Scope, message: Message, activated_extensions: Sequence[str]
    ) -> Accepted:
        """:meth:`submit` the A2A send of ``message`` by ``scope`` (see
        :meth:`Intake.activation`)."""
        return await self.submit(self.intake.activation(scope, message, activated_extensions))

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
        """:meth:`submit` a native source event (see :meth:`Intake.native_activation`)."""
        act = self.intake.native_activation(
            scope,
            source,
            event_identity,
            conversation_key,
            parts,
            context_id=context_id,
            reply_to=reply_to,
        )
        return await self.submit(act)

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
            nursery.start_soon(self.intake.admission.load_claims, self.intake.store)
            message: Accept
            async for message in inbox:
                with handling(message):
                    self.crash_hook("intake")
                    await self._limiter.acquire_on_behalf_of(message)
                nursery.start_soon(self._serve, message)

    async def _serve(self, message: Accept) -> None:
        try:
            with handling(message):
                await answer(message.reply, self.intake.accept(message.activation, message.verdict))
        finally:
            self._limiter.release_on_behalf_of(message)
