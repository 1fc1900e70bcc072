"""Node membership: the heartbeat that keeps this node's registry row live.

Design rule "One process per store" on a shared store: a node id names one live
process. The node registered when its store was opened
(:mod:`taskplane.store.postgres.nodes`); :func:`run_heartbeat` renews that row
every third of the lease length on database time, so a start with the same id is
refused while this node lives. Each renewal first checks the node's presence
session: after a database restart or a terminated session it takes the id's lock
again on a new session. A heartbeat the database cannot take (it is unreachable) is
logged, counted and tried again; a row taken over by another process, or the id's
lock held by another one, means another process runs with this id: the heartbeat
raises :class:`~taskplane.errors.Fenced` and the node stops (its supervisor does not
restart it: :data:`HEARTBEAT_POLICY`).
"""

from __future__ import annotations

import logging
from typing import Protocol

import trio

from taskplane.cluster.counters import ClusterCounters
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
    counters: ClusterCounters | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Renew ``registry`` every ``ttl_s / 3`` seconds until cancelled; a renewal
    that cannot reach the database counts in ``counters.heartbeat_failures``.

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
            if counters is not None:
                counters.heartbeat_failures += 1
            log.warning(
                "node heartbeat failed: %s",
                exc,
                extra={"event": "node_heartbeat_failed", "error": str(exc)},
            )
