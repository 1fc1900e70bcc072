"""A shared store's change records and doorbell, and this node's event tail over them.

Design rule "Streaming shows what happens after you connect", on several nodes: the
composition root (:mod:`taskplane.app`) opens a :class:`ChangeFeeds` with a
PostgreSQL store and builds the node's event tail from it once the owner registry
and intake exist (:meth:`ChangeFeeds.tail`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

import attrs

from taskplane.actors.admission_contract import IntakeGate
from taskplane.actors.owner import TaskHistory
from taskplane.actors.registry import OwnerRegistry
from taskplane.cluster.claims import ClaimFeed, ClaimsTail
from taskplane.cluster.doorbell import DoorbellSession
from taskplane.cluster.events import EventTail, VersionFeed
from taskplane.store.contract import TaskStore


class ChangeFeed(VersionFeed, ClaimFeed[Any], TaskHistory, Protocol):
    """A shared store's change records (the backend's): the stored versions of Tasks,
    the claims recorded since a cursor, and the versions of a Task after one."""


@attrs.frozen
class ChangeFeeds:
    """A shared store's change records and doorbell (cluster mode): what the event
    tail of this node reads (:mod:`taskplane.cluster.events`).

    Attributes:
        feed: the change records (Task versions, claims) over the store's inbox.
        listen: opens a doorbell session (blocking: called in a worker thread).
        node_id: this node's id (its own claims and wakes rings are dropped).
    """

    feed: ChangeFeed
    listen: Callable[[], DoorbellSession]
    node_id: str

    def tail(
        self,
        registry: OwnerRegistry,
        gate: IntakeGate,
        store: TaskStore,
        on_wake: Callable[[], None] | None = None,
    ) -> EventTail:
        """This node's event tail, feeding ``registry``'s owners and ``gate``'s claim
        index; ``on_wake``: called when a doorbell says a wake may be waiting (the
        wake queue's poke, where wakes are rows)."""
        claims = ClaimsTail(self.feed, gate, reload=partial(gate.load_claims, store))
        return EventTail(
            registry,
            self.feed,
            self.listen,
            claims=claims,
            on_wake=on_wake,
            node_id=self.node_id,
        )
