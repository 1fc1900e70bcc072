"""The ringer: one node's doorbell, rung for many batches at once.

Design rule "Streaming shows what happens after you connect", on several nodes. Each
batch the store actor commits names what it changed (:func:`doorbell.rings_of`); the
ringer gathers those names for :data:`RING_GATHER_S` after the first one arrives,
then rings them all as one NOTIFY (or a few, :data:`doorbell.MAX_PAYLOAD`) on a
session of its own, outside every batch's transaction (a NOTIFY inside one would
serialize every commit of the database). A busy node's several sessions commit a
batch every few milliseconds; their rings become one, so each listening node wakes
once for them, not once per batch.

What may be merged is what a ring means: ``t:<task>:<version>`` says "catch up to at
least this version", so a Task's newest version stands for the ones before it; ``c``
and ``w`` say "look": once is enough. Gathering adds at most :data:`RING_GATHER_S`
to what another node's subscriber waits (design target: 50 ms at p99 from commit on
one node to the update on another). A ring is a hint: one that fails, or is dropped
when the actor stops, is found by the other nodes' polls.

Pending rings are bounded by the commits of one window; past :data:`MAX_PENDING`
distinct Tasks the ringer rings at once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import outcome
import trio

from taskplane.store.postgres import doorbell
from taskplane.store.postgres.database import PgConnection

log = logging.getLogger("taskplane.store")

RING_GATHER_S = 0.005
"""Seconds the ringer waits after a batch's rings for more batches' to ring with them."""
MAX_PENDING = 2000
"""Distinct Tasks gathered before the ringer rings without waiting out the window."""


class Ringer:
    """The doorbell of one node's store actor (see the module docstring).

    Args:
        session: the ringer's own session (opened on first use; closed by
            :meth:`run`'s caller).
        sender: the node id each payload opens with (``None``: unnamed).
        gather_s: seconds to gather rings before ringing (:data:`RING_GATHER_S`).
    """

    def __init__(
        self, session: PgConnection, sender: str | None, gather_s: float = RING_GATHER_S
    ) -> None:
        self._session = session
        self._sender = sender
        self._gather_s = gather_s
        self._versions: dict[str, int] = {}
        self._flags: dict[str, None] = {}
        self._pending = trio.Event()
        self._full = trio.Event()
        self.rung = 0
        """NOTIFY statements sent so far."""

    def add(self, rings: Iterable[str]) -> None:
        """Gather ``rings`` (tokens of :mod:`doorbell`) to ring soon (synchronous, on
        the trio thread; never waits)."""
        added = False
        for ring in rings:
            added = True
            task_id, version = doorbell.parse_task_ring(ring)
            if task_id is None:
                self._flags[ring] = None
            elif version > self._versions.get(task_id, 0):
                self._versions[task_id] = version
        if added:
            self._pending.set()
            if len(self._versions) >= MAX_PENDING:
                self._full.set()

    async def run(self) -> None:
        """Ring what was gathered, once per window, until cancelled."""
        while True:
            await self._pending.wait()
            with trio.move_on_after(self._gather_s):
                await self._full.wait()
            await self.flush()

    async def flush(self) -> None:
        """Ring what was gathered now (nothing if nothing was)."""
        rings = [*self._flags, *(doorbell.task_ring(t, v) for t, v in self._versions.items())]
        self._versions, self._flags = {}, {}
        self._pending, self._full = trio.Event(), trio.Event()
        if not rings:
            return
        sender, session = self._sender, self._session
        rung = await trio.to_thread.run_sync(
            session.run_alone, lambda conn: doorbell.ring(conn, rings, sender)
        )
        if isinstance(rung, outcome.Error):
            log.warning(
                "doorbell not rung: %s", rung.error, extra={"event": "store_doorbell_failed"}
            )
        else:
            self.rung += rung.unwrap()
