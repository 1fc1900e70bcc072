"""Acceptances/s and ``apply``/s through the TaskStore API alone: PostgreSQL vs SQLite.

No HTTP, no actors: ``--callers`` concurrent trio tasks call the store directly, as
intake and the owners do. Per cell and backend:

* ``accept``: each caller accepts ``--ops`` plain new Tasks (fresh ``messageId``,
  fresh context: PostgreSQL's single-statement path);
* ``apply``: each caller then moves its own Tasks one by one, each change carrying
  one journal record (a ``WOKEN``), as an owner's write does (a compare-and-swap).

SQLite: a store root in a new temporary directory (``synchronous=FULL``, one writer,
group commit). PostgreSQL: a throwaway cluster started by the script (the tests'
own, ``tests/support/pg.py``: unix socket, server defaults, so ``fsync`` and
``synchronous_commit`` on) in the same temporary filesystem, a fresh database per
cell, the store's default sessions. Cells run interleaved (SQLite, PostgreSQL,
SQLite...) and ``--repeat`` times; the table gives the medians. The load average
is printed before and after: the figures are indicative on a shared machine.

Usage: flock /tmp/bench.lock .venv/bin/python bench/store_backends.py [--callers 1,16,64]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import trio
from _common import REPO, fsync_probe, machine_info

sys.path.insert(0, str(REPO))

from taskplane.store.contract import TaskStore
from taskplane.store.records import JournalRecord, StoredTask, TaskChange
from tests.store.backends import open_pg_store, open_sqlite_store
from tests.store.contract import LOCATOR, NOW, WORKING, activation, moved
from tests.support.pg import Cluster, start_cluster

Opener = Callable[[], AbstractAsyncContextManager[TaskStore]]


async def cell(open_store: Opener, callers: int, ops: int) -> tuple[float, float, str]:
    """(acceptances/s, applies/s, batching note) of one fresh store."""
    async with open_store() as store:
        created: list[list[StoredTask]] = [[] for _ in range(callers)]

        async def accept(n: int) -> None:
            for i in range(ops):
                accepted = await store.accept(activation(f"b-{n}-{i}-{uuid.uuid4()}"), LOCATOR, NOW)
                assert accepted.stored is not None
                created[n].append(accepted.stored)

        async def apply(n: int) -> None:
            for stored in created[n]:
                record = JournalRecord("WOKEN", "activation-b", stored.task.id, {"wokenAt": NOW})
                change = TaskChange(
                    stored, moved(stored.task, WORKING, NOW + 1), NOW + 1, (record,)
                )
                await store.apply(change)

        rates = []
        for work in (accept, apply):
            before = store.statistics()
            started = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for n in range(callers):
                    nursery.start_soon(work, n)
            rates.append(callers * ops / (time.perf_counter() - started))
        after = store.statistics()
        ops_done = after.operations - before.operations
        note = f"{ops_done} ops in {after.transactions - before.transactions} tx"
        return rates[0], rates[1], note


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--callers", default="1,16,64", help="concurrent callers, comma-separated")
    p.add_argument(
        "--ops", type=int, default=0, help="ops per caller (default: 1600/callers, at least 20)"
    )
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    levels = [int(x) for x in args.callers.split(",")]
    print(machine_info())
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with (
        tempfile.TemporaryDirectory(prefix="taskplane-store-bench-") as tmp,
        start_cluster() as cluster,
    ):
        print(fsync_probe(Path(tmp)))
        print(f"PostgreSQL cluster started in {cluster.started_in_s:.2f} s")
        results: dict[tuple[str, int], list[tuple[float, float, str]]] = {}
        for _ in range(args.repeat):
            for callers in levels:
                ops = args.ops or max(20, 1600 // callers)
                for name, opener in backends(Path(tmp), cluster):
                    value = trio.run(cell, opener, callers, ops)
                    results.setdefault((name, callers), []).append(value)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print()
    print(
        "| callers | backend | accept/s (median) | apply/s (median) | runs (accept/s)"
        " | last run batching (apply) |"
    )
    print("|---|---|---|---|---|---|")
    for callers in levels:
        for name in ("sqlite", "postgres"):
            runs = results[(name, callers)]
            accepts = statistics.median(r[0] for r in runs)
            applies = statistics.median(r[1] for r in runs)
            each = ", ".join(f"{r[0]:.0f}" for r in runs)
            print(
                f"| {callers} | {name} | {accepts:.0f} | {applies:.0f} | {each} | {runs[-1][2]} |"
            )


def backends(tmp: Path, cluster: Cluster) -> list[tuple[str, Opener]]:
    root = tmp / f"sqlite-{uuid.uuid4().hex[:8]}"
    url = cluster.fresh_store_url()
    return [("sqlite", lambda: open_sqlite_store(root)), ("postgres", lambda: open_pg_store(url))]


if __name__ == "__main__":
    main()
