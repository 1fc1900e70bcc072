"""Counts of this node's cluster events since it started, for ``/metrics``.

One mutable record per plane (never process-global: design rule "No global mutable
state"), written by the cluster actors where the event happens and read at scrape
time (:mod:`taskplane.observability`). On a SQLite store nothing writes it: every
count stays 0.
"""

from __future__ import annotations

import attrs


@attrs.define
class ClusterCounters:
    """Cluster events on this node since it started (counts).

    Attributes:
        turn_leases_lost: turns stopped because their wake's lease was no longer this
            node's (a renewal did not find it, a write under it was fenced, or the
            turn's end found it gone).
        turns_self_fenced: turns this node stopped itself because their lease went
            unrenewed for most of its length (before another node could claim it).
        fenced_writes: a turn's writes the database refused as fenced (a lease that
            is no longer current; nothing was recorded).
        wakes_reclaimed: claims of a wake that had been claimed before (epoch above
            1: after a lease lapsed or was given up, or after a pause).
        wakes_claimed_at_acceptance: wakes whose acceptance claimed their turn for
            this node (born running: design rule "A wake waits for its node").
        heartbeat_failures: node heartbeats that could not reach the database.
        leader_terms: leader terms this node started (any lease: sources, the result
            deliverer, maintenance).
    """

    turn_leases_lost: int = 0
    turns_self_fenced: int = 0
    fenced_writes: int = 0
    wakes_reclaimed: int = 0
    wakes_claimed_at_acceptance: int = 0
    heartbeat_failures: int = 0
    leader_terms: int = 0
