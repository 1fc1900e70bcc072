"""The SQLite implementation of :class:`~taskplane.store.contract.TaskStore`.

Each named operation becomes one op over the connection, run by the store actor in
its next batch (one transaction, one SAVEPOINT per op, one fsync per batch: group
commit). The connection never leaves this package. See the contract for shapes,
errors and atomicity; this module adds nothing to them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import trio

from taskplane.errors import StoreUnavailable
from taskplane.model.types import Message
from taskplane.scope import Scope
from taskplane.store.contract import AfterCommit
from taskplane.store.records import (
    Accepted,
    Activation,
    CompactionReport,
    Delivery,
    DeliveryRecord,
    DeliveryState,
    EvidenceEntry,
    EvidenceRecord,
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
from taskplane.store.sqlite import (
    acceptance,
    anchors,
    compaction,
    deliveries,
    evidence,
    journal,
    stats,
    tasks,
)
from taskplane.store.sqlite.actor import StoreRequest, submit
from taskplane.store.sqlite.database import Database, probe

T = TypeVar("T")


class SqliteStore:
    """The task store over one SQLite database. Safe to share between actors.

    Args:
        inbox: the send end of the store actor's inbox (the composition root owns
            the channel and runs :func:`~taskplane.store.sqlite.actor.run_store`).
        db: the database that actor serves (read here only for its counters).
    """

    def __init__(self, inbox: trio.MemorySendChannel[StoreRequest], db: Database) -> None:
        self._inbox = inbox
        self._db = db
        self._failed = trio.Event()

    async def _submit(
        self, op: Callable[[sqlite3.Connection], T], after: Callable[[T], None] | None = None
    ) -> T:
        try:
            return await submit(self._inbox, op, after)
        except StoreUnavailable:
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
        return await self._submit(
            lambda conn: acceptance.accept(conn, act, locator, now_ms),
            after_commit,
        )

    async def accept_direct(self, act: Activation, reply: Message, now_ms: int) -> Accepted:
        """See :meth:`TaskStore.accept_direct`."""
        return await self._submit(lambda conn: acceptance.record_direct(conn, act, reply, now_ms))

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
        """See :meth:`TaskStore.apply`."""

        def op(conn: sqlite3.Connection) -> StoredTask:
            stored = tasks.update(conn, change.before, change.after, change.now_ms)
            _append(conn, change.records, change.now_ms)
            return stored

        return await self._submit(op)

    async def append(self, records: Sequence[Record], now_ms: int) -> None:
        """See :meth:`TaskStore.append`."""
        await self._submit(lambda conn: _append(conn, records, now_ms))

    async def wake_state(self, activation_id: str, task_id: str) -> WakeState:
        """See :meth:`TaskStore.wake_state`."""

        def op(conn: sqlite3.Connection) -> WakeState:
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

        def op(conn: sqlite3.Connection) -> None:
            deliveries.save(conn, delivery, state, now_ms, response_id=response_id, error=error)
            _append(conn, records, now_ms)

        await self._submit(op)

    async def compact(self, now_ms: int) -> CompactionReport:
        """See :meth:`TaskStore.compact`."""
        return await self._submit(lambda conn: compaction.compact(conn, now_ms))

    async def counts(self, since_ms: int) -> StoreCounts:
        """See :meth:`TaskStore.counts`."""
        return await self._submit(lambda conn: stats.store_counts(conn, since_ms))

    async def probe_commit(self, now_ms: int) -> None:
        """See :meth:`TaskStore.probe_commit`."""
        await self._submit(lambda conn: probe(conn, now_ms, self._db.root))

    async def commit_failed(self) -> str:
        """See :meth:`TaskStore.commit_failed`."""
        await self._failed.wait()
        return self._db.commit_failure or "the task store could not commit"

    def statistics(self) -> StoreStatistics:
        """See :meth:`TaskStore.statistics`."""
        db = self._db
        return StoreStatistics(
            db.transactions, db.operations, db.largest_batch, commit_failure=db.commit_failure
        )


def _append(conn: sqlite3.Connection, records: Sequence[Record], now_ms: int) -> None:
    for record in records:
        if isinstance(record, EvidenceRecord):
            evidence.append(conn, record, now_ms)
        else:
            journal.append_record(conn, record, now_ms)
