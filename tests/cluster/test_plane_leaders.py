"""Two planes (nodes) on one PostgreSQL database: a native source, the deliverer and
maintenance run on one node at a time; when that node stops, the other takes over
(a new epoch) and its checkpoint writes are fenced by it; both nodes sign page tokens
with the database's key.

Real PostgreSQL and real time (leases on the database's ``now()``), with the shortest
lease length (2 s); every wait is for an event, bounded by ``trio.fail_after``.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import psycopg
import pytest
import trio

from taskplane.actors.plane import TaskPlane
from taskplane.app import open_plane
from taskplane.bridge.manifest import parse_manifest
from taskplane.cluster.identity import NodeIdentity
from taskplane.errors import Fenced
from taskplane.sources.base import Result, Sender, SourceContext
from taskplane.sources.registry import SourcePlan
from tests.support.pg import Cluster
from tests.support.plane import MANIFEST

PUBLIC_URL = "https://agents.example"
TTL_S = 2.0
WAIT_S = 20.0


@attrs.define(eq=False)
class WatchedSource:
    """A source that records the contexts it ran with and idles."""

    name: str
    node: str
    recovery: str = "idempotent"
    supports_anchors: bool = False
    contexts: list[SourceContext] = attrs.Factory(list)
    started: trio.Event = attrs.Factory(trio.Event)

    async def run(
        self, ctx: SourceContext, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        self.contexts.append(ctx)
        task_status.started()
        self.started.set()
        await trio.sleep_forever()

    def sender(self, result: Result) -> Sender:
        raise AssertionError("no results in this test")


async def run_node(
    url: str,
    root: Path,
    source: WatchedSource,
    planes: dict[str, TaskPlane],
    stop: trio.Event,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    async with open_plane(
        root,
        public_url=PUBLIC_URL,
        outputs=parse_manifest(MANIFEST, None, where="tests"),
        sources=SourcePlan((source,)),  # type: ignore[arg-type]
        store_url=url,
        node=NodeIdentity(source.node, TTL_S),
    ) as plane:
        planes[source.node] = plane
        task_status.started()
        await stop.wait()


def leases(url: str) -> dict[str, tuple[str, int]]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT name, node_id, epoch FROM leases WHERE expires_at > now()"
        ).fetchall()
    return {name: (node, epoch) for name, node, epoch in rows}


async def test_a_source_runs_on_one_node_and_moves_when_it_stops(
    pg_cluster: Cluster, tmp_path: Path
) -> None:
    url = pg_cluster.fresh_store_url()
    a, b = WatchedSource("relay", "node-a"), WatchedSource("relay", "node-b")
    planes: dict[str, TaskPlane] = {}
    stop_a, stop_b = trio.Event(), trio.Event()
    async with trio.open_nursery() as nursery:
        with trio.fail_after(WAIT_S):
            await nursery.start(run_node, url, tmp_path / "a", a, planes, stop_a)
            await a.started.wait()
            await nursery.start(run_node, url, tmp_path / "b", b, planes, stop_b)
        assert b.contexts == []  # node-b follows: the source runs on node-a only
        assert leases(url) == {
            "maintenance": ("node-a", 1),
            "source:relay": ("node-a", 1),
            "deliverer": ("node-a", 1),
        }
        assert planes["node-a"].page_key == planes["node-b"].page_key is not None
        (on_a,) = a.contexts
        await on_a.save_checkpoint("p", {"cursor": 1})

        stop_a.set()  # node-a stops: it releases its leases, node-b takes over
        with trio.fail_after(WAIT_S):
            await b.started.wait()
        (on_b,) = b.contexts
        assert leases(url)["source:relay"] == ("node-b", 2)
        assert await on_b.load_checkpoint("p") == {"cursor": 1}
        stale = attrs.evolve(on_b, term=on_a.term)  # type: ignore[misc]
        with pytest.raises(Fenced):  # a write under node-a's old term is refused
            await stale.save_checkpoint("p", {"cursor": 99})
        assert await on_b.load_checkpoint("p") == {"cursor": 1}
        await on_b.save_checkpoint("p", {"cursor": 2})
        assert await on_b.load_checkpoint("p") == {"cursor": 2}
        stop_b.set()
