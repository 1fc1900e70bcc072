"""Commit on node A to the frame on node B: how long another node's subscriber waits.

Two task planes on one PostgreSQL database in one process (node A and node B, each
with its own store actor, owners and event tail; a throwaway cluster started by the
script, as the tests start theirs: unix socket, server defaults). A Task's turn runs
on A; B subscribes to it. The turn records ``--changes`` outputs one at a time; each
change's latency is from the moment A's tool call returned (its commit answered) to
the moment B's subscriber received that change's frame, on one clock. One change is
in flight at a time (closed loop), so the figure is the path's latency, not a queue:
B's event tail hears the doorbell, owner(T) on B reads the new version and publishes
it. The tails' polls are an hour apart, so every frame crossed by its doorbell.

Usage: flock /tmp/bench.lock .venv/bin/python bench/cross_node_latency.py [--changes 300]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio
from _common import REPO

sys.path.insert(0, str(REPO))

from taskplane.cluster import claims as claims_tail
from taskplane.cluster import events
from tests.cluster.nodes import open_node
from tests.support.agent import Agent, Turn
from tests.support.pg import start_cluster
from tests.support.virtual import ALICE, send


async def measure(url: str, root: Path, changes: int) -> list[float]:
    """The latencies (seconds) of ``changes`` changes, in order."""
    go_tx, go_rx = trio.open_memory_channel[int](0)
    committed: dict[int, float] = {}

    async def script(agent: Agent, turn: Turn) -> None:
        async for n in go_rx:
            await turn.tools.a2a_record_output(turn.task_id, "pull-request", {"n": n})
            committed[n] = time.perf_counter()
        await turn.tools.a2a_complete_task(turn.task_id, "done")

    latencies: list[float] = []
    async with (
        open_node(url, root, "node-a", Agent(script)) as a,
        open_node(url, root, "node-b", Agent(script)) as b,
    ):
        accepted = await send(a.plane, "changes", "m-bench")
        assert accepted.task is not None
        await a.agent.wait_turns(1)
        frames = await b.plane.subscribe(ALICE, accepted.task.id)
        await frames.receive()  # the snapshot
        async with go_tx:
            for n in range(1, changes + 1):
                await go_tx.send(n)
                with trio.fail_after(30):
                    while True:
                        frame = await frames.receive()
                        update = frame.artifact_update
                        if update is not None and update.artifact.parts[0].data.value == {"n": n}:
                            break
                latencies.append(time.perf_counter() - committed[n])
    return latencies


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=300)
    args = parser.parse_args()
    events.POLL_S = 3600.0
    claims_tail.CLAIMS_POLL_S = 3600.0
    print(f"load average before: {os.getloadavg()}")
    with start_cluster() as cluster, tempfile.TemporaryDirectory() as tmp:
        found = trio.run(measure, cluster.fresh_store_url(), Path(tmp), args.changes)
    print(f"load average after: {os.getloadavg()}")
    ms = [x * 1000 for x in found]
    print(
        f"commit on A -> frame on B, {len(ms)} changes: p50 {statistics.median(ms):.2f} ms, "
        f"p90 {quantile(ms, 0.90):.2f} ms, p99 {quantile(ms, 0.99):.2f} ms, "
        f"max {max(ms):.2f} ms"
    )


if __name__ == "__main__":
    main()
