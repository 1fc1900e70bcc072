"""The store facade: every named :class:`~taskplane.store.contract.TaskStore`
operation turned into one op and handed to a backend's store actor.

One recorder contract, backends that differ only where the engine differs. A
backend supplies a :class:`Recorder` (the blocking functions of its private
connection, or the op a request becomes where the backend runs it its own way) and
its store actor; :class:`StoreFacade` holds the delegation, the shapes and the
commit-failure wake-up that are the same for every backend. The commit test, the
failure text and the counters are the backend's own (:meth:`StoreFacade.probe_commit`,
:meth:`StoreFacade.commit_failed`, :meth:`StoreFacade.statistics`). See the contract
for shapes, errors and atomicity; this module adds nothing to them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Generic, Protocol, TypeVar

import trio

from taskplane.errors import StoreUnavailable
from taskplane.model.types import Message
from taskplane.scope import Scope
from taskplane.store.contract import AfterCommit
from taskplane.store.records import (
    Accepted,
    Activation,
    ActivationState,
    CompactionReport,
    Delivery,
    DeliveryRecord,
    DeliveryState,
    EvidenceEntry,
    Fence,
    JournalEntry,
    Locator,
    PendingActivation,
    Record,
    StoreCounts,
    StoredTask,
    TaskChange,
    TaskPage,
    TaskQuery,
    TurnClaim,
    WakeState,
)
from taskplane.store.requests import ReadOp, StoreRequest, submit

T = TypeVar("T")
C = TypeVar("C")
C_contra = TypeVar("C_contra", contravariant=True)


class Recorder(Protocol[C_contra]):
    """What a backend records with: blocking functions of its connection ``C``,
    called only inside its store actor's transaction, plus the two ops a backend may
    run its own way (``accept_op``, ``apply_op``: a batch may fuse them). Each has
    the shape and errors of the :class:`~taskplane.store.contract.TaskStore`
    operation of the same meaning."""

    def accept_op(
        self, act: Activation, locator: Locator, now_ms: int, turn: TurnClaim | None
    ) -> Callable[[C_contra], Accepted]: ...

    def apply_op(self, change: TaskChange) -> Callable[[C_contra], StoredTask]: ...

    def record_direct(
        self, conn: C_contra, act: Activation, reply: Message, now_ms: int
    ) -> Accepted: ...

    def find_duplicate(self, conn: C_contra, act: Activation) -> Accepted | None: ...

    def anchor_target(self, conn: C_contra, act: Activation) -> str | None: ...

    def claimed_keys(self, conn: C_contra) -> tuple[int, Iterator[str]]: ...

    def record_anchor(
        self,
        conn: C_contra,
        scope: Scope,
        source: str,
        provider_response_id: str,
        task_id: str,
        now_ms: int,
    ) -> None: ...

    def load(self, conn: C_contra, task_id: str) -> StoredTask | None: ...

    def load_scoped(self, conn: C_contra, scope: Scope, task_id: str) -> StoredTask: ...

    def list_page(self, conn: C_contra, query: TaskQuery) -> TaskPage: ...

    def append(
        self, conn: C_contra, records: Sequence[Record], now_ms: int, fence: Fence | None
    ) -> None: ...

    def activation_state(self, conn: C_contra, activation: str) -> ActivationState: ...

    def replayable_activations(self, conn: C_contra) -> tuple[PendingActivation, ...]: ...

    def journal_entries(
        self, conn: C_contra, task_id: str | None, activation_id: str | None
    ) -> tuple[JournalEntry, ...]: ...

    def evidence_entries(
        self, conn: C_contra, record_type: str | None, task_id: str | None
    ) -> tuple[EvidenceEntry, ...]: ...

    def load_delivery(self, conn: C_contra, delivery_id: str) -> DeliveryRecord | None: ...

    def save_delivery(
        self,
        conn: C_contra,
        delivery: Delivery,
        state: DeliveryState,
        now_ms: int,
        *,
        response_id: str | None,
        error: str | None,
    ) -> None: ...

    def compact(self, conn: C_contra, now_ms: int) -> CompactionReport: ...

    def store_counts(self, conn: C_contra, since_ms: int) -> StoreCounts: ...


class StoreFacade(Generic[C]):
    """The backend-neutral half of a task store over connection type ``C``.

    Args:
        inbox: the send end of the backend's store actor inbox (the composition root
            owns the channel and runs the actor).
        recorder: the backend's :class:`Recorder`.
    """

    def __init__(self, inbox: trio.MemorySendChannel[StoreRequest], recorder: Recorder[C]) -> None:
        self._inbox = inbox
        self._rec = recorder
        self._failed = trio.Event()

    def _store_failed(self, exc: StoreUnavailable) -> None:
        """Called once per op whose transaction could not commit (a backend that
        remembers the failure itself overrides this)."""

    async def _submit(self, op: Callable[[C], T], after: Callable[[T], None] | None = None) -> T:
        try:
            return await submit(self._inbox, op, after)
        except StoreUnavailable as exc:
            self._store_failed(exc)
            self._failed.set()  # wake the waiters of commit_failed
            self._failed = trio.Event()
            raise

    async def _read(self, fn: Callable[[C], T]) -> T:
        """:meth:`_submit` for an op that only reads (:class:`ReadOp`)."""
        return await self._submit(ReadOp(fn))

    async def accept(
        self,
        act: Activation,
        locator: Locator,
        now_ms: int,
        *,
        after_commit: AfterCommit | None = None,
        turn: TurnClaim | None = None,
    ) -> Accepted:
        """See :meth:`TaskStore.accept`."""
        return await self._submit(self._rec.accept_op(act, locator, now_ms, turn), after_commit)

    async def accept_direct(self, act: Activation, reply: Message, now_ms: int) -> Accepted:
        """See :meth:`TaskStore.accept_direct`."""
        return await self._submit(lambda conn: self._rec.record_direct(conn, act, reply, now_ms))

    async def find_duplicate(self, act: Activation) -> Accepted | None:
        """See :meth:`TaskStore.find_duplicate`."""
        return await self._submit(lambda conn: self._rec.find_duplicate(conn, act))

    async def scan_claims(self, fold: Callable[[int, Iterator[str]], T]) -> T:
        """See :meth:`TaskStore.scan_claims`."""
        return await self._read(lambda conn: fold(*self._rec.claimed_keys(conn)))

    async def anchor_target(self, act: Activation) -> str | None:
        """See :meth:`TaskStore.anchor_target`."""
        return await self._read(lambda conn: self._rec.anchor_target(conn, act))

    async def record_anchor(
        self, scope: Scope, source: str, provider_response_id: str, task_id: str, now_ms: int
    ) -> None:
        """See :meth:`TaskStore.record_anchor`."""
        rec = self._rec
        await self._submit(
            lambda conn: rec.record_anchor(
                conn, scope, source, provider_response_id, task_id, now_ms
            ),
        )

    async def find_task(self, task_id: str) -> StoredTask | None:
        """See :meth:`TaskStore.find_task`."""
        return await self._read(lambda conn: self._rec.load(conn, task_id))

    async def load_task(self, scope: Scope, task_id: str) -> StoredTask:
        """See :meth:`TaskStore.load_task`."""
        return await self._read(lambda conn: self._rec.load_scoped(conn, scope, task_id))

    async def list_tasks(self, query: TaskQuery) -> TaskPage:
        """See :meth:`TaskStore.list_tasks`."""
        return await self._read(lambda conn: self._rec.list_page(conn, query))

    async def apply(self, change: TaskChange) -> StoredTask:
        """See :meth:`TaskStore.apply`."""
        return await self._submit(self._rec.apply_op(change))

    async def append(
        self, records: Sequence[Record], now_ms: int, *, fence: Fence | None = None
    ) -> None:
        """See :meth:`TaskStore.append`."""
        await self._submit(lambda conn: self._rec.append(conn, records, now_ms, fence))

    async def wake_state(self, activation_id: str, task_id: str) -> WakeState:
        """See :meth:`TaskStore.wake_state`."""
        rec = self._rec

        def op(conn: C) -> WakeState:
            return WakeState(rec.activation_state(conn, activation_id), rec.load(conn, task_id))

        return await self._read(op)

    async def pending_activations(self) -> tuple[PendingActivation, ...]:
        """See :meth:`TaskStore.pending_activations`."""
        return await self._read(self._rec.replayable_activations)

    async def journal(
        self, *, task_id: str | None = None, activation_id: str | None = None
    ) -> tuple[JournalEntry, ...]:
        """See :meth:`TaskStore.journal`."""
        return await self._read(
            lambda conn: self._rec.journal_entries(conn, task_id, activation_id)
        )

    async def evidence(
        self, *, record_type: str | None = None, task_id: str | None = None
    ) -> tuple[EvidenceEntry, ...]:
        """See :meth:`TaskStore.evidence`."""
        return await self._read(lambda conn: self._rec.evidence_entries(conn, record_type, task_id))

    async def load_delivery(self, delivery_id: str) -> DeliveryRecord | None:
        """See :meth:`TaskStore.load_delivery`."""
        return await self._read(lambda conn: self._rec.load_delivery(conn, delivery_id))

    async def save_delivery(
        self,
        delivery: Delivery,
        state: DeliveryState,
        now_ms: int,
        *,
        response_id: str | None = None,
        error: str | None = None,
        records: Sequence[Record] = (),
    ) -> None:
        """See :meth:`TaskStore.save_delivery`."""
        rec = self._rec

        def op(conn: C) -> None:
            rec.save_delivery(conn, delivery, state, now_ms, response_id=response_id, error=error)
            rec.append(conn, records, now_ms, None)

        await self._submit(op)

    async def compact(self, now_ms: int) -> CompactionReport:
        """See :meth:`TaskStore.compact`."""
        return await self._submit(lambda conn: self._rec.compact(conn, now_ms))

    async def counts(self, since_ms: int) -> StoreCounts:
        """See :meth:`TaskStore.counts`."""
        return await self._read(lambda conn: self._rec.store_counts(conn, since_ms))
