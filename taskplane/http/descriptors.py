"""The process's file descriptor budget: raise the soft limit, size the connection cap.

Each open connection holds one descriptor. At startup the soft ``RLIMIT_NOFILE`` is
raised to the hard limit (the common soft default, 1,024, is far below the usual hard
one), and the connection cap is lowered to what the budget allows, keeping
:data:`RESERVED_DESCRIPTORS` for the store, log files, agent processes and the
listener itself (design rule "No client can stop or hold the server": descriptor exhaustion is first
avoided, then backed off from).
"""

from __future__ import annotations

import logging
import resource

__all__ = ["RESERVED_DESCRIPTORS", "connection_budget", "raise_descriptor_limit"]

log = logging.getLogger("taskplane")

RESERVED_DESCRIPTORS = 64
"""Descriptors kept out of the connection budget (store, logs, agents, listener)."""
MIN_CONNECTIONS = 8
"""The connection cap never goes below this, however small the descriptor limit."""


def raise_descriptor_limit() -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit; log when it changed.

    Returns:
        The soft limit in force afterwards (descriptors; a large number stands for
        "unlimited").

    Raises:
        Nothing: a limit that cannot be raised (``ValueError``/``OSError``) is kept
        and logged.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == hard:
        return soft if soft != resource.RLIM_INFINITY else 1 << 20
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as exc:
        log.warning(
            "could not raise the descriptor limit from %d to %d: %s",
            soft,
            hard,
            exc,
            extra={"event": "descriptor_limit_kept", "soft": soft, "hard": hard},
        )
        return soft
    log.info(
        "descriptor limit raised from %d to %d",
        soft,
        hard,
        extra={"event": "descriptor_limit_raised", "from": soft, "to": hard},
    )
    return hard


def connection_budget(configured: int, descriptor_limit: int) -> int:
    """The connection cap in force: ``configured``, lowered to ``descriptor_limit -``
    :data:`RESERVED_DESCRIPTORS` (at least :data:`MIN_CONNECTIONS`); logged when
    lowered. Pure apart from that log line."""
    budget = max(MIN_CONNECTIONS, descriptor_limit - RESERVED_DESCRIPTORS)
    if configured <= budget:
        return configured
    log.warning(
        "TASKPLANE_MAX_CONNECTIONS=%d lowered to %d: the descriptor limit is %d",
        configured,
        budget,
        descriptor_limit,
        extra={
            "event": "connection_cap_lowered",
            "configured": configured,
            "cap": budget,
            "descriptorLimit": descriptor_limit,
        },
    )
    return budget
