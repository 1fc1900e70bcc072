"""Who this node is among the nodes sharing one store, and how long its leases last.

Design rule "Turn authority is a lease": a node's turns, and its leadership of the
work only one node may do at a time, are leases on the database's clock that the node
renews; ``lease_ttl_s`` is their length. ``node_id`` names the node in every lease
and in the node registry (a second live node with the same id is refused).
"""

from __future__ import annotations

import secrets

import attrs

from taskplane.settings import DEFAULT_LEASE_TTL_S as DEFAULT_LEASE_TTL_S
from taskplane.settings import MAX_LEASE_TTL_S as MAX_LEASE_TTL_S
from taskplane.settings import MIN_LEASE_TTL_S as MIN_LEASE_TTL_S


def generated_node_id() -> str:
    """A fresh node id, ``node-`` + 12 hex digits (used when none is configured)."""
    return f"node-{secrets.token_hex(6)}"


@attrs.frozen
class NodeIdentity:
    """This node's name and lease length.

    Attributes:
        node_id: the node's id (``TASKPLANE_NODE_ID``; default generated per start).
        lease_ttl_s: seconds a lease lasts unless renewed, ``MIN_LEASE_TTL_S`` to
            ``MAX_LEASE_TTL_S`` (``TASKPLANE_LEASE_TTL_S``).
    """

    node_id: str = attrs.field(factory=generated_node_id)
    lease_ttl_s: float = DEFAULT_LEASE_TTL_S
