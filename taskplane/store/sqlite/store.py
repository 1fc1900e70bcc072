"""The SQLite implementation of :class:`~taskplane.store.contract.TaskStore`.

Each named operation becomes one op over the connection (:mod:`taskplane.store.facade`),
run by the store actor in its next batch (one transaction, one SAVEPOINT per op, one
fsync per batch: group commit). The connection never leaves this package. What is
SQLite's own here: the recorder's functions, the commit probe (with its free-room
check) and the failure and counters the :class:`Database` keeps.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence

import trio

from taskplane.store.facade import StoreFacade
from taskplane.store.records import (
    Accepted,
    Activation,
    EvidenceRecord,
    Fence,
    Locator,
    Record,
    StoredTask,
    StoreStatistics,
    TaskChange,
    TurnClaim,
)
from taskplane.store.requests import StoreRequest
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
from taskplane.store.sqlite.database import Database, probe


def _append(
    conn: sqlite3.Connection, records: Sequence[Record], now_ms: int, fence: Fence | None = None
) -> None:
    # One process per store root: no lease can move, so every fence is current.
    for record in records:
        if isinstance(record, EvidenceRecord):
            evidence.append(conn, record, now_ms)
        else:
            journal.append_record(conn, record, now_ms)


class SqliteRecorder:
    """The :class:`~taskplane.store.facade.Recorder` over a ``sqlite3.Connection``."""

    @staticmethod
    def accept_op(
        act: Activation, locator: Locator, now_ms: int, turn: TurnClaim | None
    ) -> Callable[[sqlite3.Connection], Accepted]:
        """The op that accepts ``act`` (:func:`acceptance.accept`); ``turn`` is not
        served (one process: the wake queue is the wake actor's memory)."""
        return lambda conn: acceptance.accept(conn, act, locator, now_ms)

    @staticmethod
    def apply_op(change: TaskChange) -> Callable[[sqlite3.Connection], StoredTask]:
        """The op that applies ``change``: the Task's update, then its records."""

        def op(conn: sqlite3.Connection) -> StoredTask:
            stored = tasks.update(conn, change.before, change.after, change.now_ms)
            _append(conn, change.records, change.now_ms, change.fence)
            return stored

        return op

    record_direct = staticmethod(acceptance.record_direct)
    find_duplicate = staticmethod(acceptance.find_duplicate)
    anchor_target = staticmethod(acceptance.anchor_target)
    claimed_keys = staticmethod(journal.claimed_keys)
    record_anchor = staticmethod(anchors.record)
    load = staticmethod(tasks.load)
    load_scoped = staticmethod(tasks.load_scoped)
    list_page = staticmethod(tasks.list_page)
    append = staticmethod(_append)
    activation_state = staticmethod(journal.activation_state)
    replayable_activations = staticmethod(journal.replayable_activations)
    journal_entries = staticmethod(journal.entries)
    evidence_entries = staticmethod(evidence.entries)
    load_delivery = staticmethod(deliveries.load)
    save_delivery = staticmethod(deliveries.save)
    compact = staticmethod(compaction.compact)
    store_counts = staticmethod(stats.store_counts)


class SqliteStore(StoreFacade[sqlite3.Connection]):
    """The task store over one SQLite database. Safe to share between actors.

    Args:
        inbox: the send end of the store actor's inbox (the composition root owns
            the channel and runs :func:`~taskplane.store.sqlite.actor.run_store`).
        db: the database that actor serves (read here only for its counters).
    """

    def __init__(self, inbox: trio.MemorySendChannel[StoreRequest], db: Database) -> None:
        super().__init__(inbox, SqliteRecorder())
        self._db = db

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
