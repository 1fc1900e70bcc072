"""The cluster wake actor's turn slots (``taskplane.cluster.wake``), on trio's mock
clock over wake rows that answer when told: a claim in flight holds the slots it may
fill, so an acceptance meanwhile is not let claim one too (the node would hold more
turns than ``A2A_AGENT_CONCURRENCY``)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import trio
import trio.testing

from taskplane.actors.turns import RunningTurns
from taskplane.actors.wake_turns import TurnSettings
from taskplane.cluster.identity import NodeIdentity
from taskplane.cluster.wake import ClusterWakeActor
from taskplane.store.records import Fence, PendingActivation
from taskplane.store.wake_rows import Claimed, QueueFigures, Renewal


class Rows:
    """Wake rows whose claims wait until :attr:`answer` is set, then claim nothing."""

    affinity_s = 0.2

    def __init__(self) -> None:
        self.claiming = trio.Event()
        self.answer = trio.Event()
        self.claims = 0

    async def claim(
        self, limit: int, held: Collection[str], *, figures: bool
    ) -> tuple[list[Claimed], QueueFigures | None]:
        self.claims += 1
        self.claiming.set()
        await self.answer.wait()
        return [], QueueFigures(0, 0) if figures else None

    async def renew(self, fences: Sequence[Fence]) -> Renewal:
        return Renewal(frozenset(f.activation_id for f in fences))

    async def complete(self, fence: Fence) -> bool:
        return True

    async def pause(self, fence: Fence, delay_s: float) -> bool:
        return True

    async def restore(self, pending: Sequence[PendingActivation]) -> int:
        return 0

    async def expire_own(self) -> int:
        return 0

    def close(self) -> None:
        pass


def actor(rows: Rows) -> ClusterWakeActor:
    none: Any = None  # the turn's collaborators: no turn runs here
    return ClusterWakeActor(
        none,
        none,
        none,
        none,
        lambda: 0,
        RunningTurns(),
        rows=rows,
        node=NodeIdentity("node-a"),
        settings=TurnSettings(concurrency=1),
    )


async def test_a_claim_in_flight_holds_its_slots_from_acceptances(
    autojump_clock: trio.testing.MockClock,
) -> None:
    rows = Rows()
    wake = actor(rows)
    async with trio.open_nursery() as nursery:
        await nursery.start(wake.run)
        await rows.claiming.wait()  # the first poll's claim, for the one free slot
        assert wake.claim_at_acceptance("act-1") is None
        rows.answer.set()  # it claimed nothing: the slot is free again
        await trio.testing.wait_all_tasks_blocked()
        claim = wake.claim_at_acceptance("act-1")
        assert claim is not None and claim.node_id == "node-a"
        assert wake.claim_at_acceptance("act-2") is None  # the one slot is held
        wake.unclaimed("act-1")
        assert wake.claim_at_acceptance("act-2") is not None
        nursery.cancel_scope.cancel()
