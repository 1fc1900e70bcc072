"""Helpers for the end-to-end tests of the native sources: the environment that runs a
source alone, bounded waits on a real ``taskplane serve`` process, its log events, a
hard kill, and reads of the SQLite file it wrote."""

from __future__ import annotations

import signal
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from tests.e2e.taskplane_proc import POLL_INTERVAL_S, STOP_GRACE_S, Spawner, TaskplaneProcess

DEADLINE_S = 30.0
"""Upper bound for what a source test waits for (a reply, a delivery, a reconnect)."""


def sources_env(spawn: Spawner, store: Path, channel: str, **variables: str) -> dict[str, str]:
    """The environment of a ``taskplane serve`` that runs the native source ``channel``
    alone (no A2A listener) over ``store``, plus ``variables``."""
    return spawn.env(
        A2A_SERVER="0",
        CHANNELS_TASK_STORE_PATH=str(store),
        OUTFITTER_CHANNELS=channel,
        **variables,
    )


def wait_for(
    predicate: Callable[[], object],
    what: str,
    process: TaskplaneProcess,
    deadline_s: float = DEADLINE_S,
) -> None:
    """Poll ``predicate`` until it is true; fail (with the captured output) when the
    process exits first or the deadline passes."""
    deadline = time.monotonic() + deadline_s
    while not predicate():
        if process.returncode is not None or time.monotonic() > deadline:
            raise AssertionError(f"waiting for {what}\n{process.describe()}")
        time.sleep(POLL_INTERVAL_S)


def event_names(process: TaskplaneProcess) -> list[object]:
    """The ``event`` field of each JSON log line on the process's stderr."""
    return [e.get("event") for e in process.log_events()]


def sigkill(process: TaskplaneProcess) -> None:
    """SIGKILL the process and reap it: no shutdown code runs."""
    process.proc.send_signal(signal.SIGKILL)
    process.proc.wait(timeout=STOP_GRACE_S)


def store_rows(store: Path, sql: str) -> list[tuple[object, ...]]:
    """The rows ``sql`` selects from the store file under ``store``."""
    with sqlite3.connect(store / "taskplane.sqlite3") as conn:
        return conn.execute(sql).fetchall()
