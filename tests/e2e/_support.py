"""Helpers for the end-to-end tests: a text message sent to a real ``taskplane serve``,
the environment that runs a native source alone, bounded waits on the process, its log
events, a hard kill, and reads of the SQLite file it wrote."""

from __future__ import annotations

import signal
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol, Self, TypeVar

import httpx

from tests.e2e.taskplane_proc import (
    POLL_INTERVAL_S,
    STOP_GRACE_S,
    RunningServer,
    Spawner,
    TaskplaneProcess,
)

DEADLINE_S = 30.0
"""Upper bound for what a source test waits for (a reply, a delivery, a reconnect)."""
HTTP_TIMEOUT_S = 30.0
"""Default upper bound for one request to the server."""


async def send_text(
    server: RunningServer,
    text: str,
    *,
    task_id: str | None = None,
    timeout_s: float = HTTP_TIMEOUT_S,
    **configuration: Any,
) -> dict[str, Any]:
    """``POST /message:send`` of a user text message (to ``task_id`` when given, with
    ``configuration`` when given) as the server's credential; asserts 200 and returns
    the Task JSON."""
    message: dict[str, Any] = {
        "messageId": f"e2e-{uuid.uuid4()}",
        "role": "ROLE_USER",
        "parts": [{"text": text}],
    }
    if task_id is not None:
        message["taskId"] = task_id
    body: dict[str, Any] = {"message": message}
    if configuration:
        body["configuration"] = configuration
    async with httpx.AsyncClient(timeout=timeout_s) as client:
        response = await client.post(
            server.url + "/message:send", json=body, headers=server.auth_headers()
        )
    assert response.status_code == 200, response.text
    task: dict[str, Any] = response.json()["task"]
    return task


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


def logged(process: TaskplaneProcess, *events: str, at_least: int = 1) -> list[object]:
    """:func:`event_names` once each of ``events`` is in the log ``at_least`` times.

    A live server's log lines are written by its log writer thread, up to its batch
    window after the code that logged them ran, so a test reads the log of a running
    server only once the lines it expects are there (fails like :func:`wait_for`)."""
    wait_for(
        lambda: all(event_names(process).count(e) >= at_least for e in events),
        f"{', '.join(events)} in the log",
        process,
    )
    return event_names(process)


def sigkill(process: TaskplaneProcess) -> None:
    """SIGKILL the process and reap it: no shutdown code runs."""
    process.proc.send_signal(signal.SIGKILL)
    process.proc.wait(timeout=STOP_GRACE_S)


def store_rows(store: Path, sql: str) -> list[tuple[object, ...]]:
    """The rows ``sql`` selects from the store file under ``store``."""
    with sqlite3.connect(store / "taskplane.sqlite3") as conn:
        return conn.execute(sql).fetchall()


def replies(store: Path) -> list[tuple[object, ...]]:
    """The ``(state, provider_response_id)`` of each reply delivery in the store under
    ``store`` (operation ids ``reply:…``)."""
    return store_rows(
        store,
        "SELECT state, provider_response_id FROM deliveries WHERE operation_id LIKE 'reply:%'",
    )


def wait_for_replies(store: Path, states: list[str], what: str, process: TaskplaneProcess) -> None:
    """:func:`wait_for` the states of the reply deliveries (in :func:`replies` order) to
    be ``states``."""
    wait_for(lambda: [r[0] for r in replies(store)] == states, what, process)


def leave_replies_sending(store: Path) -> None:
    """Put every reply delivery of the (stopped) store back to ``sending`` with no
    provider id: what a crash between the send and its record leaves behind."""
    with sqlite3.connect(store / "taskplane.sqlite3") as conn:
        conn.execute(
            "UPDATE deliveries SET state = 'sending', provider_response_id = NULL"
            " WHERE operation_id LIKE 'reply:%'"
        )


def kill_with_the_reply_sending(process: TaskplaneProcess, store: Path) -> None:
    """Once the process has delivered its one reply, SIGKILL it and
    :func:`leave_replies_sending`: the crash case that a restart must resolve (fail
    closed, or reconcile by a provider lookup)."""
    wait_for_replies(store, ["delivered"], "the reply", process)
    sigkill(process)
    leave_replies_sending(store)


class Fake(Protocol):
    """A fake provider served from its own thread: ``start`` returns it serving."""

    def start(self) -> Self: ...

    def close(self) -> None: ...


F = TypeVar("F", bound=Fake)


def serving(fake: F) -> Iterator[F]:
    """The body of a fixture that yields ``fake`` started and closes it afterwards."""
    started = fake.start()
    try:
        yield started
    finally:
        started.close()


def post_text(server: RunningServer, text: str) -> dict[str, Any]:
    """A blocking ``POST /message:send`` from a plain thread (no trio); the Task JSON."""
    body = {
        "message": {
            "messageId": f"e2e-{uuid.uuid4()}",
            "role": "ROLE_USER",
            "parts": [{"text": text}],
        }
    }
    response = httpx.post(
        server.url + "/message:send",
        json=body,
        headers=server.auth_headers(),
        timeout=HTTP_TIMEOUT_S,
    )
    assert response.status_code == 200, response.text
    task: dict[str, Any] = response.json()["task"]
    return task


def read_task(server: RunningServer, task_id: str) -> dict[str, Any]:
    """``GET /tasks/{task_id}`` from a plain thread (no trio); asserts 200."""
    response = httpx.get(
        f"{server.url}/tasks/{task_id}", headers=server.auth_headers(), timeout=HTTP_TIMEOUT_S
    )
    assert response.status_code == 200, response.text
    task: dict[str, Any] = response.json()
    return task
