"""The PostgreSQL implementation of :class:`~taskplane.store.contract.TaskStore`.

Each named operation becomes one op over a session, run by the store actor in the
next batch of a free session (one transaction; one SAVEPOINT per op when the batch
holds several). The hot paths are single statements: a new Task's acceptance
(:mod:`taskplane.store.postgres.acceptance`) and ``apply``, a compare-and-swap on the
Task's version chained to its records (:mod:`taskplane.store.postgres.writes`).
Sessions never leave this package. See the contract for shapes, errors and
atomicity; this module adds nothing to them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import trio

from taskplane.errors import StoreUnavailable
from taskplane.model.types import Message
from taskplane.scope import Scope
from taskplane.store.contract import AfterCommit
from taskplane.store.postgres import (
    acceptance,
    anchors,
    compaction,
    deliveries,
    evidence,
    journal,
    stats,
    tasks,
    writes,
)
from taskplane.store.postgres.actor import BatchCounters
from taskplane.store.postgres.schema import Connection, probe
from taskplane.store.records import (
    Accepted,
    Activation,
    CompactionReport,
    Delivery,
    DeliveryRecord,
    DeliveryState,
    EvidenceEntry,
    JournalEntry,
    Locator,
    PendingActivation,
    Record,
    StoreCounts,
    StoredTask,
    StoreStatistics,
    TaskChange,
    TaskPage,
    TaskQuery,
    WakeState,
)
from taskplane.store.requests import StoreRequest, submit

T = TypeVar("T")


class PgStore:
    """The task store over one PostgreSQL database. Safe to share between actors.

    Args:
        inbox: the send end of the store actor's inbox (the composition root owns
            the channel and runs :func:`~taskplane.store.postgres.actor.run_store`).
        counters: the counters that actor updates (read here only).
    """

    def __init__(
        self, inbox: trio.MemorySendChannel[StoreRequest], counters: BatchCounters
    ) -> None:
        self._inbox = inbox
        self._counters = counters
        self._commit_failure: str | None = None
        self._failed = trio.Event()

    async def _submit(
        self, op: Callable[[Connection], T], after: Callable[[T], None] | None = None
    ) -> T:
        try:
            return await submit(self._inbox, op, after)
        except StoreUnavailable as exc:
            # Remembered until the write probe commits (readiness probes while it is set).
            self._commit_failure = str(exc)
            self._failed.set()  # wake the waiters of commit_failed
            self._failed = trio.Event()
            raise

    async def accept(
        self,
        act: Activation,
        locator: Locator,
        now_ms: int,
        *,
        after_commit: AfterCommit | None = None,
    ) -> Accepted:
        """See :meth:`TaskStore.accept`."""
        return await self._submit(acceptance.accept_op(act, locator, now_ms), after_commit)

    async def accept_direct(self, act: Activation, reply: Message, now_ms: int) -> Accepted:
        """See :meth:`TaskStore.accept_direct`."""
        return await self._submit(
            lambda conn: acceptance.record_direct(conn, act, reply, now_ms)
        )

    async def find_duplicate(self, act: Activation) -> Accepted | None:
        """See :meth:`TaskStore.find_duplicate`."""
        return await self._submit(lambda conn: acceptance.find_duplicate(conn, act))

    async def scan_claims(self, fold: Callable[[int, Iterator[str]], T]) -> T:
        """See :meth:`TaskStore.scan_claims`."""
        return await self._submit(lambda conn: fold(*journal.claimed_keys(conn)))

    async def anchor_target(self, act: Activation) -> str | None:
        """See :meth:`TaskStore.anchor_target`."""
        return await self._submit(lambda conn: acceptance.anchor_target(conn, act))

    async def record_anchor(
        self, scope: Scope, source: str, provider_response_id: str, task_id: str, now_ms: int
    ) -> None:
        """See :meth:`TaskStore.record_anchor`."""
        await self._submit(
            lambda conn: anchors.record(conn, scope, source, provider_response_id, task_id, now_ms),
        )

    async def find_task(self, task_id: str) -> StoredTask | None:
        """See :meth:`TaskStore.find_task`."""
        return await self._submit(lambda conn: tasks.load(conn, task_id))

    async def load_task(self, scope: Scope, task_id: str) -> StoredTask:
        """See :meth:`TaskStore.load_task`."""
        return await self._submit(lambda conn: tasks.load_scoped(conn, scope, task_id))

    async def list_tasks(self, query: TaskQuery) -> TaskPage:
        """See :meth:`TaskStore.list_tasks`."""
        return await self._submit(lambda conn: tasks.list_page(conn, query))

    async def apply(self, change: TaskChange) -> StoredTask:
        """See :meth:`TaskStore.apply` (one compare-and-swap statement)."""
        return await self._submit(writes.ApplyChange(change))

    async def append(self, records: Sequence[Record], now_ms: int) -> None:
        """See :meth:`TaskStore.append`."""
        await self._submit(lambda conn: writes.append(conn, records, now_ms))

    async def wake_state(self, activation_id: str, task_id: str) -> WakeState:
        """See :meth:`TaskStore.wake_state`."""

        def op(conn: Connection) -> WakeState:
            state = journal.activation_state(conn, activation_id)
            return WakeState(state, tasks.load(conn, task_id))

        return await self._submit(op)

    async def pending_activations(self) -> tuple[PendingActivation, ...]:
        """See :meth:`TaskStore.pending_activations`."""
        return await self._submit(journal.replayable_activations)

    async def journal(
        self, *, task_id: str | None = None, activation_id: str | None = None
    ) -> tuple[JournalEntry, ...]:
        """See :meth:`TaskStore.journal`."""
        return await self._submit(lambda conn: journal.entries(conn, task_id, activation_id))

    async def evidence(
        self, *, record_type: str | None = None, task_id: str | None = None
    ) -> tuple[EvidenceEntry, ...]:
        """See :meth:`TaskStore.evidence`."""
        return await self._submit(lambda conn: evidence.entries(conn, record_type, task_id))

    async def load_delivery(self, delivery_id: str) -> DeliveryRecord | None:
        """See :meth:`TaskStore.load_delivery`."""
        return await self._submit(lambda conn: deliveries.load(conn, delivery_id))

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

        def op(conn: Connection) -> None:
            deliveries.save(conn, delivery, state, now_ms, response_id=response_id, error=error)
            writes.append(conn, records, now_ms)

        await self._submit(op)

    async def compact(self, now_ms: int) -> CompactionReport:
        """See :meth:`TaskStore.compact`."""
        return await self._submit(lambda conn: compaction.compact(conn, now_ms))

    async def counts(self, since_ms: int) -> StoreCounts:
        """See :meth:`TaskStore.counts`."""
        return await self._submit(lambda conn: stats.store_counts(conn, since_ms))

    async def probe_commit(self, now_ms: int) -> None:
        """See :meth:`TaskStore.probe_commit` (the server owns its disk: no room check
        here; the commit is the test)."""
        await self._submit(lambda conn: probe(conn, now_ms))
        self._commit_failure = None

    async def commit_failed(self) -> str:
        """See :meth:`TaskStore.commit_failed`."""
        await self._failed.wait()
        return self._commit_failure or "the task store could not commit"

    def statistics(self) -> StoreStatistics:
        """See :meth:`TaskStore.statistics` (a failure is remembered until the write
        probe commits)."""
        c = self._counters
        return StoreStatistics(
            c.transactions, c.operations, c.largest_batch, commit_failure=self._commit_failure
        )
