"""The PostgreSQL implementation of :class:`~taskplane.store.contract.TaskStore`.

Each named operation becomes one op over a session (:mod:`taskplane.store.facade`),
run by the store actor in the next batch of a free session (one transaction; one
SAVEPOINT per op when the batch holds several). The hot paths are single statements:
a new Task's acceptance (:mod:`taskplane.store.postgres.acceptance`) and ``apply``, a
compare-and-swap on the Task's version chained to its records
(:mod:`taskplane.store.postgres.writes`). Sessions never leave this package. What is
PostgreSQL's own here: the recorder's functions, the commit probe, and the failure
remembered until that probe commits.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from taskplane.errors import StoreUnavailable
from taskplane.store.facade import StoreFacade
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
from taskplane.store.records import Accepted, Activation, Locator, StoreStatistics, TurnClaim
from taskplane.store.requests import StoreRequest


class PgRecorder:
    """The :class:`~taskplane.store.facade.Recorder` over a psycopg connection
    (``accept_op`` and ``apply_op`` are ops a batch may fuse), for node ``node_id``
    (``None``: no node; its acceptances' wakes name it, design rule "A wake waits for
    its node")."""

    def __init__(self, node_id: str | None = None) -> None:
        self.node_id = node_id

    def accept_op(
        self, act: Activation, locator: Locator, now_ms: int, turn: TurnClaim | None
    ) -> Callable[[Connection], Accepted]:
        return acceptance.accept_op(act, locator, now_ms, self.node_id, turn)

    apply_op = staticmethod(writes.ApplyChange)
    record_direct = staticmethod(acceptance.record_direct)
    find_duplicate = staticmethod(acceptance.find_duplicate)
    anchor_target = staticmethod(acceptance.anchor_target)
    claimed_keys = staticmethod(journal.claimed_keys)
    record_anchor = staticmethod(anchors.record)
    load = staticmethod(tasks.load)
    load_scoped = staticmethod(tasks.load_scoped)
    list_page = staticmethod(tasks.list_page)
    append = staticmethod(writes.append)
    activation_state = staticmethod(journal.activation_state)
    replayable_activations = staticmethod(journal.replayable_activations)
    journal_entries = staticmethod(journal.entries)
    evidence_entries = staticmethod(evidence.entries)
    load_delivery = staticmethod(deliveries.load)
    save_delivery = staticmethod(deliveries.save)
    compact = staticmethod(compaction.compact)
    store_counts = staticmethod(stats.store_counts)


class PgStore(StoreFacade[Connection]):
    """The task store over one PostgreSQL database. Safe to share between actors.

    Args:
        inbox: the send end of the store actor's inbox (the composition root owns
            the channel and runs :func:`~taskplane.store.postgres.actor.run_store`).
        counters: the counters that actor updates (read here only).
        node_id: the node whose store this is (``None``: no node, as an operator
            command's).
    """

    def __init__(
        self,
        inbox: trio.MemorySendChannel[StoreRequest],
        counters: BatchCounters,
        node_id: str | None = None,
    ) -> None:
        super().__init__(inbox, PgRecorder(node_id))
        self._counters = counters
        self._commit_failure: str | None = None

    def _store_failed(self, exc: StoreUnavailable) -> None:
        # Remembered until the write probe commits (readiness probes while it is set).
        self._commit_failure = str(exc)

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
