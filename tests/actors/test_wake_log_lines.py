"""The failed-turn log line counts what it says: ``delivery n of 5`` (the durable
cap) and the failed turns so far, never "attempt 5 of 3" (virtual time)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from taskplane.actors.wake import MAX_WAKE_DELIVERIES
from taskplane.model.enums import TaskState
from tests.support.agent import Agent
from tests.support.plane import open_test_plane
from tests.support.virtual import events, options, send, settle, task_id_of


async def test_failed_turn_lines_count_deliveries_of_the_cap(
    store_root: Path,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent = Agent()
    async with open_test_plane(store_root, options(agent)) as plane:
        task_id = task_id_of(await send(plane, "fail", "m-fail"))
        failed = await settle(plane, task_id)
    assert failed.status.state is TaskState.TASK_STATE_FAILED
    lines = [r.getMessage() for r in events(caplog, "a2a_wake_failed")]
    assert len(lines) == MAX_WAKE_DELIVERIES
    for n, line in enumerate(lines, start=1):
        assert f"({n} failed turns; delivery {n} of {MAX_WAKE_DELIVERIES})" in line
        assert "attempt" not in line.split(": ")[0]  # the message before the error's repr
