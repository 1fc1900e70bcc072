"""The claims tail: this node's claim index learns the claims other nodes record.

Design rule "Idempotent intake", on several nodes. The claim index
(:mod:`taskplane.actors.claim_filter`) answers "certainly never claimed" without a
store round trip, so it must hold every claim, also those recorded through other
nodes. The tail reads them by transaction watermark (the feed's cursor, e.g.
:class:`~taskplane.store.postgres.events.ClaimCursor`): each read takes exactly the
claims its previous read's snapshot could not see, so a claim whose transaction
started early and committed late is read on the next round, never skipped. Reads
run when a doorbell says claims were recorded, and every :data:`CLAIMS_POLL_S` for a
doorbell that was lost.

What the lag can cost: within it, a duplicate of a send accepted through another node
moments ago may be judged certainly new while the wake queue is full, and refused
with a retryable 503; it never mints a second Task (the claim's unique key decides
every acceptance in the store).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Generic, Protocol, TypeVar

import trio

from taskplane.errors import ActorGone, StoreUnavailable

log = logging.getLogger("taskplane.cluster.claims")

CLAIMS_POLL_S = 1.0
"""Seconds between reads when no doorbell rings (a lost doorbell's extra lag)."""
CLAIMS_MIN_GAP_S = 0.05
"""Fewest seconds between two reads: the doorbells of a busy cluster (one per batch
of every node) coalesce into at most one read per gap, since a lag this short costs
no more than the lag the module docstring describes."""

Cursor = TypeVar("Cursor")


class ClaimFeed(Protocol[Cursor]):
    """Where new claims are read (the backend's)."""

    async def claim_cursor(self) -> Cursor:
        """A cursor at the current snapshot. Raises StoreUnavailable."""
        ...

    async def claims_after(self, cursor: Cursor) -> tuple[Cursor, list[str]]:
        """The provider keys of the claims ``cursor`` could not see, and the next
        cursor. Raises StoreUnavailable."""
        ...


class ClaimSink(Protocol):
    """The claim index's two calls (:class:`~taskplane.actors.admission_contract.IntakeGate`)."""

    def may_be_claimed(self, key: str) -> bool: ...

    def claimed(self, key: str) -> None: ...


class ClaimsTail(Generic[Cursor]):
    """Feeds every claim recorded after :meth:`start` into ``sink``.

    Args:
        feed: where claims are read.
        sink: the claim index.
        reload: rebuilds the index from every stored claim; called when the first
            cursor could only be taken after the index was loaded (claims recorded in
            between would be missed otherwise).
        poll_s: seconds between reads without a doorbell.
        min_gap_s: fewest seconds between two reads (:data:`CLAIMS_MIN_GAP_S`).
    """

    def __init__(
        self,
        feed: ClaimFeed[Cursor],
        sink: ClaimSink,
        reload: Callable[[], Awaitable[None]] | None = None,
        poll_s: float = CLAIMS_POLL_S,
        min_gap_s: float = CLAIMS_MIN_GAP_S,
    ) -> None:
        self._feed = feed
        self._sink = sink
        self._reload = reload
        self._poll_s = poll_s
        self._min_gap_s = min_gap_s
        self._cursor: Cursor | None = None
        self._late = False
        self._poked = trio.Event()
        self.read_count = 0
        self.keys_noted = 0

    async def start(self) -> None:
        """Take the first cursor. Call it before the claim index is loaded: every claim
        the cursor counts as read is then in the load. A failure is logged; the cursor
        is taken later and the index reloaded."""
        try:
            self._cursor = await self._feed.claim_cursor()
        except (StoreUnavailable, ActorGone) as exc:
            log.warning("claims tail not started: %s", exc, extra={"event": "claims_tail_late"})
            self._late = True

    def poke(self) -> None:
        """Claims were recorded (a doorbell said so): read them now."""
        self._poked.set()

    async def read(self) -> int:
        """Read the claims recorded since the last read into the index; how many new
        keys were noted.

        Raises:
            StoreUnavailable, ActorGone: the store cannot be read (the cursor stays).
        """
        if self._cursor is None:
            self._cursor = await self._feed.claim_cursor()
            if self._late and self._reload is not None:
                await self._reload()
            self._late = False
            return 0
        cursor, keys = await self._feed.claims_after(self._cursor)
        self._cursor = cursor
        self.read_count += 1
        noted = 0
        for key in keys:
            if not self._sink.may_be_claimed(key):
                self._sink.claimed(key)
                noted += 1
        self.keys_noted += noted
        return noted

    async def run(self) -> None:
        """Read on each doorbell and every ``poll_s`` seconds, at most once per
        ``min_gap_s``, until cancelled."""
        while True:
            with trio.move_on_after(self._poll_s):
                await self._poked.wait()
            self._poked = trio.Event()
            try:
                await self.read()
            except (StoreUnavailable, ActorGone) as exc:
                log.debug("claims tail read failed: %s", exc)
            await trio.sleep(self._min_gap_s)  # doorbells rung meanwhile: one read
