"""The claims tail's pacing (``taskplane.cluster.claims``), on trio's mock clock: the
doorbells of a busy cluster coalesce into at most one read per gap, and a claim
rung meanwhile is read by the next one."""

from __future__ import annotations

import itertools

import trio
import trio.testing

from taskplane.cluster.claims import CLAIMS_MIN_GAP_S, CLAIMS_POLL_S, ClaimsTail


class Feed:
    """Claims recorded by other nodes, read by cursor (the number read so far)."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.reads: list[float] = []

    async def claim_cursor(self) -> int:
        return 0

    async def claims_after(self, cursor: int) -> tuple[int, list[str]]:
        self.reads.append(trio.current_time())
        return len(self.keys), self.keys[cursor:]


class Index:
    def __init__(self) -> None:
        self.keys: set[str] = set()

    def may_be_claimed(self, key: str) -> bool:
        return key in self.keys

    def claimed(self, key: str) -> None:
        self.keys.add(key)


async def test_doorbells_within_the_gap_are_one_read_and_none_is_missed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    feed, index = Feed(), Index()
    tail = ClaimsTail(feed, index)
    await tail.start()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(tail.run)
        await trio.testing.wait_all_tasks_blocked()
        start = trio.current_time()
        for n in range(50):  # fifty batches' doorbells at once
            feed.keys.append(f"k-{n}")
            tail.poke()
            await trio.testing.wait_all_tasks_blocked()
        await trio.sleep(CLAIMS_MIN_GAP_S * 3)
        assert index.keys == {f"k-{n}" for n in range(50)}
        reads = [t - start for t in feed.reads]
        assert 1 <= len(reads) <= 2
        assert all(b - a >= CLAIMS_MIN_GAP_S for a, b in itertools.pairwise(reads))
        await trio.sleep(CLAIMS_POLL_S * 2)  # no doorbell: it still polls
        assert len(feed.reads) > len(reads)
        nursery.cancel_scope.cancel()
