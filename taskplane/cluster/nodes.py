"""Node membership: the heartbeat that keeps this node's registry row live.

Design rule "One process per store" on a shared store: a node id names one live
process. The node registered when its store was opened
(:mod:`taskplane.store.postgres.nodes`); :func:`run_heartbeat` renews that row
every third of the lease length on database time, so a start with the same id is
refused while this node lives, and taken over once it has been silent for a lease
length. A heartbeat the database cannot take (it is unreachable) is logged and
tried again; a row taken over by another process means this node was cut off past
its lease: the heartbeat raises :class:`~taskplane.errors.Fenced` and the node stops
(its supervisor does not restart it: :data:`HEARTBEAT_POLICY`).
"""

from __future__ import annotations

import logging
from typing import Protocol

import trio

from taskplane.errors import Fenced
from taskplane.supervision import RestartPolicy

log = logging.getLogger("taskplane.cluster")

HEARTBEAT_POLICY = RestartPolicy(max_restarts=0, period_s=1.0)
"""A heartbeat that crashes is not restarted: the plane stops (a taken-over id is
the only crash it expects; the database being away is retried inside the loop)."""


class Registry(Protocol):
    """This node's registry row."""

    async def heartbeat(self) -> None:
        """Renew the row on database time.

        Raises:
            Fenced: another process took this node's id over.
            StoreUnavailable: the database cannot be reached.
        """
        ...


async def run_heartbeat(
    registry: Registry,
    ttl_s: float,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Renew ``registry`` every ``ttl_s / 3`` seconds until cancelled.

    Raises:
        Fenced: the node's id was taken over; the node must stop.
    """
    task_status.started()
    while True:
        await trio.sleep(ttl_s / 3)
        try:
            await registry.heartbeat()
        except Fenced:
            log.error(
                "this node's id was taken over by another process; stopping",
                extra={"event": "node_taken_over"},
            )
            raise
        except Exception as exc:  # the database is away: try again
            log.warning(
                "node heartbeat failed: %s",
                exc,
                extra={"event": "node_heartbeat_failed", "error": str(exc)},
            )
