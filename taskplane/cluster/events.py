"""The event tail: one per node, it shows this node's owners what other nodes commit.

Design rules "Streaming shows what happens after you connect" and "Cancel stops the
running turn", on several nodes. owner(T) may run on several nodes (design rule "One
writer per Task"); a subscriber or a blocking send on node B is served by B's
owner(T), so B must learn of every version of T committed through node A, in order,
promptly:

* every committed version is a row (the backend's change records), written in the
  transaction of the change;
* after each COMMIT the writing node rings a doorbell (:mod:`taskplane.cluster.doorbell`)
  naming the versions; this tail LISTENs on one dedicated session, read on the trio
  thread (wait until its socket is readable, then drain it without blocking), and
  tells each live owner here whose snapshot is older to catch up
  (:meth:`~taskplane.actors.registry.OwnerRegistry.announce`); the owner reads the
  versions after its snapshot, in version order, and publishes each exactly as a
  local commit (and stops its Task's local turn when another node ended the Task);
* a doorbell can be lost (a node dying between COMMIT and NOTIFY, this session
  reconnecting), so every :data:`POLL_S` the tail compares the live owners' snapshot
  versions with the stored ones and announces what moved; the session reconnects with
  backoff and polls at once when it is back.

The doorbell's claims ring pokes the claims tail (:mod:`taskplane.cluster.claims`);
its wake ring calls ``on_wake`` (the wake actor's poke, where wakes are rows).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import trio

from taskplane.backoff import backoff
from taskplane.cluster.claims import ClaimsTail
from taskplane.cluster.doorbell import DoorbellSession, Heard, parse
from taskplane.errors import ActorGone, StoreUnavailable

log = logging.getLogger("taskplane.cluster.events")

POLL_S = 1.0
"""Seconds between polls of the watched Tasks' versions (a lost doorbell's lag)."""
RECONNECT_FIRST_S = 0.1
RECONNECT_CAP_S = 5.0


class VersionFeed(Protocol):
    """Where the stored versions of Tasks are read (the backend's)."""

    async def current_versions(self, task_ids: Iterable[str]) -> dict[str, int]:
        """Task id -> stored version (Tasks gone are left out). Raises StoreUnavailable."""
        ...


class Owners(Protocol):
    """What the tail asks the owner registry."""

    def announce(self, task_id: str, version: int) -> bool: ...

    def watched(self) -> dict[str, int]: ...


class EventTail:
    """The event tail of one node.

    Args:
        owners: the owner registry.
        feed: reads stored versions (the poll).
        listen: opens a doorbell session (blocking: called in a worker thread; raises
            StoreUnavailable).
        claims: the claims tail to poke and run (``None``: none).
        on_wake: called on the trio thread when a doorbell says a wake may be waiting;
            must not block (``None``: nothing).
        poll_s: seconds between polls (default :data:`POLL_S`, read when the tail
            starts).
        node_id: this node's id (its own claims and wakes rings are dropped, see
            :func:`~taskplane.cluster.doorbell.parse`; ``None``: none dropped).
    """

    def __init__(
        self,
        owners: Owners,
        feed: VersionFeed,
        listen: Callable[[], DoorbellSession],
        *,
        claims: ClaimsTail[Any] | None = None,
        on_wake: Callable[[], None] | None = None,
        poll_s: float | None = None,
        node_id: str | None = None,
    ) -> None:
        self._owners = owners
        self._node_id = node_id
        self._feed = feed
        self._listen = listen
        self._claims = claims
        self.on_wake = on_wake
        self._poll_s = poll_s
        self._poll_now = trio.Event()
        self.sessions_opened = 0
        self.rings_heard = 0
        self.announced_by_poll = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen and poll until cancelled. Reports started once the claims tail has
        its first cursor (so start it before the claim index is loaded)."""
        if self._claims is not None:
            await self._claims.start()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._listen_loop)
            nursery.start_soon(self._poll_loop)
            if self._claims is not None:
                nursery.start_soon(self._claims.run)
            task_status.started()

    def heard(self, heard: Heard) -> None:
        """Act on what a doorbell said (synchronous)."""
        self.rings_heard += 1
        for task_id, version in heard.versions.items():
            self._owners.announce(task_id, version)
        if heard.claims and self._claims is not None:
            self._claims.poke()
        if heard.wake and self.on_wake is not None:
            self.on_wake()

    async def poll(self) -> int:
        """Compare the watched Tasks' snapshots with the store and announce what moved;
        how many were announced.

        Raises:
            StoreUnavailable, ActorGone: the store cannot be read.
        """
        watched = self._owners.watched()
        if not watched:
            return 0
        stored = await self._feed.current_versions(watched)
        moved = 0
        for task_id, version in stored.items():
            if version > watched.get(task_id, version) and self._owners.announce(task_id, version):
                moved += 1
        self.announced_by_poll += moved
        return moved

    async def _poll_loop(self) -> None:
        poll_s = POLL_S if self._poll_s is None else self._poll_s
        while True:
            with trio.move_on_after(poll_s):
                await self._poll_now.wait()
            self._poll_now = trio.Event()
            try:
                await self.poll()
            except (StoreUnavailable, ActorGone) as exc:
                log.debug("event poll failed: %s", exc)

    async def _listen_loop(self) -> None:
        delays = backoff(RECONNECT_FIRST_S, RECONNECT_CAP_S)
        while True:
            try:
                session = await trio.to_thread.run_sync(self._listen)
            except StoreUnavailable as exc:
                log.warning("doorbell: %s", exc, extra={"event": "doorbell_unavailable"})
                await trio.sleep(next(delays))
                continue
            delays = backoff(RECONNECT_FIRST_S, RECONNECT_CAP_S)
            try:
                self.sessions_opened += 1
                self._poll_now.set()  # rings sent while not listening are lost: poll
                if self._claims is not None:
                    self._claims.poke()
                await self._serve(session)
            except StoreUnavailable as exc:
                log.warning("doorbell: %s", exc, extra={"event": "doorbell_lost"})
            finally:
                session.close()
            await trio.sleep(next(delays))

    async def _serve(self, session: DoorbellSession) -> None:
        """Drain ``session`` each time its socket is readable, until it breaks."""
        while True:
            await trio.lowlevel.wait_readable(session.fileno())
            payloads = session.drain()
            if payloads:
                self.heard(parse(payloads, self._node_id))
