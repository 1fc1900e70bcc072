"""Test children with buttons, and small helpers, for the supervision tests.

No sleeps: a child waits on a per-incarnation Event (its "button") and the test
presses it, then calls ``trio.testing.wait_all_tasks_blocked()`` before asserting.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio

from taskplane.supervision import LOGGER_NAME, ChildSpec, CrashReport, RestartType

DEADLINE_S = 1000.0
"""Guard for every test (virtual seconds under ``autojump_clock``): a regression that
leaves a test waiting fails at once with TooSlowError instead of hanging."""


class Boom(Exception):
    """The crash a test child raises."""


class Child:
    """An actor-shaped test child.

    Each incarnation appends ``"start <name>"`` to ``journal``, calls
    ``started("<name>#<n>")`` and waits for :meth:`press`. ``"crash"`` raises
    :class:`Boom`, ``"return"`` returns. An incarnation cancelled from outside appends
    ``"stop <name>"``. Incarnations listed in ``fail_start`` raise before started().
    """

    def __init__(
        self,
        name: str,
        journal: list[str] | None = None,
        *,
        fail_start: frozenset[int] = frozenset(),
    ) -> None:
        self.name = name
        self.journal: list[str] = [] if journal is None else journal
        self.fail_start = fail_start
        self.starts = 0
        self.start_times: list[float] = []
        self._button = trio.Event()
        self._action = ""

    def spec(self, restart_type: RestartType = RestartType.TRANSIENT) -> ChildSpec:
        return ChildSpec(self.name, self.run, restart_type)

    def press(self, action: str) -> None:
        assert action in ("crash", "return")
        assert not self._button.is_set(), f"{self.name}: button already pressed"
        self._action = action
        self._button.set()

    async def run(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        self.starts += 1
        incarnation = self.starts
        self.start_times.append(trio.current_time())
        self.journal.append(f"start {self.name}")
        if incarnation in self.fail_start:
            raise Boom(f"{self.name} failed to start #{incarnation}")
        self._button = trio.Event()
        self._action = ""
        button = self._button
        task_status.started(f"{self.name}#{incarnation}")
        try:
            await button.wait()
        except trio.Cancelled:
            self.journal.append(f"stop {self.name}")
            raise
        if self._action == "crash":
            raise Boom(f"{self.name} crash #{incarnation}")


async def settle() -> None:
    await trio.testing.wait_all_tasks_blocked()


def drain(rx: trio.MemoryReceiveChannel[CrashReport]) -> list[CrashReport]:
    out: list[CrashReport] = []
    while True:
        try:
            out.append(rx.receive_nowait())
        except trio.WouldBlock:
            return out


def events(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [
        r for r in caplog.records if r.name == LOGGER_NAME and getattr(r, "event", None) == event
    ]


def attr(record: logging.LogRecord, name: str) -> Any:
    return record.__dict__[name]
