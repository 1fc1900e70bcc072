"""Readiness reasons and actor liveness, without a server."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from taskplane.http.metrics import Metrics, PlaneStatistics
from taskplane.observability import Liveness, MeasuredRuntime


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


class _Turns:
    """An agent runtime whose turns succeed or raise as told."""

    def __init__(self) -> None:
        self.fail = False

    def triage(self, message: object) -> None:
        return None

    async def run_turn(self, task_id: str, prompt: str, tools: object) -> None:
        if self.fail:
            raise RuntimeError("the turn failed")

    async def release(self, task_id: str) -> None:
        return None

    async def aclose(self) -> None:
        return None


async def test_a_successful_turn_is_the_last_recovery_and_a_failed_one_is_not() -> None:
    clock = [1_000]
    inner = _Turns()
    runtime = MeasuredRuntime(inner, Metrics(), lambda: clock[0])  # type: ignore[arg-type]
    assert runtime.last_success_ms == 0
    await runtime.run_turn("t-1", "hello", None)  # type: ignore[arg-type]
    assert runtime.last_success_ms == 1_000
    clock[0] = 2_000
    inner.fail = True
    with pytest.raises(RuntimeError):
        await runtime.run_turn("t-2", "fail", None)  # type: ignore[arg-type]
    assert runtime.last_success_ms == 1_000  # a failure recovers nothing
    clock[0] = 3_000
    inner.fail = False
    await runtime.run_turn("t-3", "hello", None)  # type: ignore[arg-type]
    assert runtime.last_success_ms == 3_000


def test_a_stopped_source_is_a_reason() -> None:
    stats = PlaneStatistics(
        store_open=True, actors_running=True, wake_queue_limit=128, stopped_sources=("relay",)
    )
    assert stats.not_ready_reasons() == ["source relay stopped after repeated failures"]


def test_the_cluster_counters_and_the_running_turns_are_exposed() -> None:
    reading = PlaneStatistics(
        turn_running=True,
        turns_running=3,
        turn_leases_lost=4,
        turns_self_fenced=1,
        fenced_writes=2,
        wakes_reclaimed=5,
        wakes_claimed_at_acceptance=8,
        heartbeat_failures=6,
        leader_terms=7,
    )
    text = Metrics().render(reading).decode()
    for line in (
        "taskplane_turn_running 1.0",  # the flag keeps its name and meaning
        "taskplane_turns_running 3.0",
        "taskplane_turn_leases_lost_total 4.0",
        "taskplane_turns_self_fenced_total 1.0",
        "taskplane_fenced_writes_total 2.0",
        "taskplane_wakes_reclaimed_total 5.0",
        "taskplane_wakes_claimed_at_acceptance_total 8.0",
        "taskplane_heartbeat_failures_total 6.0",
        "taskplane_leader_terms_total 7.0",
    ):
        assert f"\n{line}\n" in text, line
    assert "# TYPE taskplane_fenced_writes_total counter" in text
