"""Stopping ``taskplane serve``: signals, and the running turn's deadline.

Design rule "Shutdown gives the running turn a deadline; what it does not finish is
replayed" (``docs/design-rules.md``, ``docs/operations.md``).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import AsyncIterator

import trio

from taskplane.observability import PlaneObserver

log = logging.getLogger("taskplane")

TURN_SHUTDOWN_DEADLINE_S = 5.0
"""Seconds a running agent turn may take to finish after a shutdown signal; after
that it is cancelled and its wake replayed at the next start."""


async def finish_turn(observer: PlaneObserver, *, shared_store: bool = False) -> None:
    """Give a running turn :data:`TURN_SHUTDOWN_DEADLINE_S` to end, start no new one.

    ``shared_store``: the store is PostgreSQL (cluster mode), where a wake left
    unfinished is taken by a node once its lease expires, not replayed at this
    node's next start; the ``turn_left_for_replay`` line says which."""
    if observer.runtime is None:
        return
    with trio.CancelScope(shield=True):
        finished = await observer.runtime.drain(TURN_SHUTDOWN_DEADLINE_S)
    if not finished:
        after = (
            "another node (or this one, restarted) takes its wake over once its lease "
            "expires (TASKPLANE_LEASE_TTL_S)"
            if shared_store
            else "its wake will be replayed at the next start"
        )
        log.warning(
            "the running turn did not finish within %s s; it is cancelled and %s",
            TURN_SHUTDOWN_DEADLINE_S,
            after,
            extra={"event": "turn_left_for_replay"},
        )


async def stop_on_signals(signals: AsyncIterator[int], shutdown: trio.Event) -> None:
    """SIGINT/SIGTERM handling for ``taskplane serve``.

    The first signal starts the graceful shutdown (``shutdown`` is set: blocking sends
    answer with their snapshot, streams end with a final frame, the running turn gets
    :data:`TURN_SHUTDOWN_DEADLINE_S`). A second signal exits at once, with a message
    on stderr and status ``128 + signal number``: committed work is safe (every
    commit is atomic), a turn in progress is replayed at the next start. The log lines
    queued for the log writer (``shutdown_forced`` among them) are written first, for
    at most :data:`taskplane.logging_setup.LOG_DRAIN_DEADLINE_S` per handler.
    """
    first = True
    async for signum in signals:
        name = signal.Signals(signum).name
        if first:
            first = False
            log.info(
                "received %s; shutting down (send it again to exit at once)",
                name,
                extra={"event": "shutdown_requested", "signal": name},
            )
            shutdown.set()
            continue
        log.warning("received %s again; exiting now", name, extra={"event": "shutdown_forced"})
        logging.shutdown()  # os._exit skips the interpreter's exit hooks, which drain the log
        sys.stderr.write(f"taskplane: {name} received twice; exiting without waiting\n")
        sys.stderr.flush()
        os._exit(128 + signum)
