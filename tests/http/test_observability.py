"""Readiness reasons and actor liveness, without a server."""

from __future__ import annotations

from typing import Any

import trio

from taskplane.http.metrics import PlaneStatistics
from taskplane.observability import Liveness


def test_a_healthy_reading_is_ready() -> None:
    stats = PlaneStatistics(store_open=True, actors_running=True, wake_queue_limit=128)
    assert stats.not_ready_reasons() == []


def test_each_unhealthy_condition_gives_a_reason() -> None:
    stats = PlaneStatistics(
        store_open=False,
        actors_running=False,
        wake_queue_depth=128,  # reserved slots included
        wake_queue_reserved=8,
        wake_queue_limit=128,
        unhealthy_since_recovery=2,
    )
    reasons = stats.not_ready_reasons()
    assert len(reasons) == 4
    assert stats.overloaded


async def test_liveness_marks_an_actor_running_from_started_to_its_exit() -> None:
    liveness = Liveness()
    stop = trio.Event()

    async def actor(*, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await stop.wait()

    async with trio.open_nursery() as nursery:
        await nursery.start(liveness.track("wake", actor))
        assert liveness.running == {"wake"}
        stop.set()
    assert liveness.running == set()
