"""Store maintenance on a shared store: the ``maintenance`` leader's work.

On a SQLite store each start compacts its own store. On a store shared by several
nodes, compaction is the ``maintenance`` leader's (one node at a time,
:mod:`taskplane.cluster.leader`): at the start of each term and then every
:data:`MAINTENANCE_INTERVAL_S`, it compacts the store (design rule "Operational
records are compacted at startup", on a shared store by the leader) and prunes the
registry rows of long-dead nodes and long-expired leases. Failures are logged and
tried again at the next interval.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from taskplane.store.contract import TaskStore

log = logging.getLogger("taskplane.cluster")
store_log = logging.getLogger("taskplane.store")
"""The logger of ``store_compacted``: a store event, on SQLite (at startup) as on a
shared store (the maintenance leader)."""

MAINTENANCE_INTERVAL_S = 3600.0
"""Seconds between two maintenance passes of the leader."""


async def compact_once(store: TaskStore, now_ms: int) -> None:
    """Compact ``store`` and log what was removed (``store_compacted``)."""
    report = await store.compact(now_ms)
    removed = attrs.asdict(report)
    store_log.info(
        "store compacted: %d rows removed (%s)",
        sum(removed.values()),
        ", ".join(f"{table} {count}" for table, count in removed.items()),
        extra={"event": "store_compacted", **removed},
    )


async def run_maintenance(
    store: TaskStore,
    prune: Callable[[], Awaitable[tuple[int, int]]],
    now_ms: Callable[[], int],
    term: object,
    *,
    interval_s: float = MAINTENANCE_INTERVAL_S,
    task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
) -> None:
    """One leader term of maintenance (``term`` unused: nothing here is fenced;
    compaction removes only what retention no longer keeps, so two passes at once
    would be harmless)."""
    task_status.started()
    while True:
        try:
            await compact_once(store, now_ms())
            pruned_nodes, pruned_leases = await prune()
            if pruned_nodes or pruned_leases:
                log.info(
                    "pruned %d dead nodes and %d expired leases",
                    pruned_nodes,
                    pruned_leases,
                    extra={
                        "event": "cluster_pruned",
                        "nodes": pruned_nodes,
                        "leases": pruned_leases,
                    },
                )
        except Exception as exc:  # the next pass tries again
            log.warning(
                "store maintenance failed: %s",
                exc,
                extra={"event": "maintenance_failed", "error": str(exc)},
            )
        await trio.sleep(interval_s)
