"""The node heartbeat (taskplane.cluster.nodes) on virtual time: it renews every third
of the lease length, rides out a database that is away, and stops the node (its
supervisor does not restart it) once the node's id was taken over."""

from __future__ import annotations

from functools import partial

import pytest
import trio
import trio.testing

from taskplane.cluster.counters import ClusterCounters
from taskplane.cluster.nodes import HEARTBEAT_POLICY, run_heartbeat
from taskplane.errors import Fenced, StoreUnavailable
from taskplane.supervision import ChildSpec, RestartIntensityExceeded, RestartType, supervise

TTL = 15.0


class Registry:
    def __init__(self, outcomes: list[Exception | None]) -> None:
        self.outcomes = outcomes
        self.beats: list[float] = []

    async def heartbeat(self) -> None:
        self.beats.append(trio.current_time())
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if outcome is not None:
            raise outcome


async def test_the_heartbeat_renews_every_third_of_the_lease_and_rides_out_an_outage(
    autojump_clock: trio.testing.MockClock,
) -> None:
    registry = Registry([None, StoreUnavailable("away"), StoreUnavailable("away"), None])
    counters = ClusterCounters()
    with trio.move_on_after(5 * TTL / 3 + 0.1):
        await run_heartbeat(registry, TTL, counters=counters)
    assert registry.beats == pytest.approx([5.0, 10.0, 15.0, 20.0, 25.0])
    assert counters.heartbeat_failures == 2  # for /metrics


async def test_a_taken_over_id_stops_the_node_without_a_restart(
    autojump_clock: trio.testing.MockClock,
) -> None:
    registry = Registry([None, Fenced("node id web-1 was taken over")])
    spec = ChildSpec(
        name="heartbeat",
        start=partial(run_heartbeat, registry, TTL),
        restart_type=RestartType.PERMANENT,
    )
    with pytest.raises(RestartIntensityExceeded) as stopped:
        await supervise(spec, HEARTBEAT_POLICY)
    assert isinstance(stopped.value.__cause__, Fenced)
    assert registry.beats == pytest.approx([5.0, 10.0])  # not restarted
