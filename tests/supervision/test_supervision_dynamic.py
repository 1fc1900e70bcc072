"""open_dynamic_supervisor(): on-demand children, per-child intensity, forgetting, escalation."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from taskplane.supervision import (
    LOGGER_NAME,
    ChildSpec,
    CrashReport,
    DynamicSupervisorStatistics,
    RestartIntensityExceeded,
    RestartPolicy,
    RestartType,
    open_dynamic_supervisor,
)
from tests.supervision.supervision_testkit import DEADLINE_S, Boom, Child, drain, settle

GENEROUS = RestartPolicy(max_restarts=100, period_s=60)


@pytest.fixture(autouse=True)
def _capture_supervision_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER_NAME)


async def test_starts_children_on_demand_and_returns_their_started_value(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        a, b = Child("owner:a"), Child("owner:b")
        async with open_dynamic_supervisor(GENEROUS) as sup:
            assert sup.statistics() == DynamicSupervisorStatistics(0, 0, 0)
            assert await sup.start_child(a.spec()) == "owner:a#1"
            assert await sup.start_child(b.spec()) == "owner:b#1"
            assert "owner:a" in sup and "owner:c" not in sup
            assert sup.statistics() == DynamicSupervisorStatistics(2, 2, 0)
            sup.cancel_scope.cancel()


async def test_restarts_a_crashed_child_and_leaves_the_others_alone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        journal: list[str] = []
        a, b = Child("a", journal), Child("b", journal)
        tx, rx = trio.open_memory_channel[CrashReport](8)
        async with open_dynamic_supervisor(GENEROUS, tx) as sup:
            await sup.start_child(a.spec())
            await sup.start_child(b.spec())
            journal.clear()
            a.press("crash")
            await settle()
            assert journal == ["start a"]
            assert sup.statistics() == DynamicSupervisorStatistics(2, 2, 1)
            sup.cancel_scope.cancel()
        assert [(r.child, r.restarts_in_window) for r in drain(rx)] == [("a", 1)]


async def test_forgets_a_transient_child_that_returned_and_frees_its_name(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        a = Child("a")
        async with open_dynamic_supervisor(GENEROUS) as sup:
            await sup.start_child(a.spec())
            a.press("return")
            await settle()
            assert "a" not in sup
            assert sup.statistics().active_children == 0
            assert await sup.start_child(a.spec()) == "a#2"  # the name is free again
            assert sup.statistics() == DynamicSupervisorStatistics(1, 2, 0)
            a.press("return")
        assert a.starts == 2


async def test_forgets_a_temporary_child_that_crashed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        a = Child("a")
        tx, rx = trio.open_memory_channel[CrashReport](8)
        async with open_dynamic_supervisor(GENEROUS, tx) as sup:
            await sup.start_child(a.spec(RestartType.TEMPORARY))
            a.press("crash")
            await settle()
            assert sup.statistics() == DynamicSupervisorStatistics(0, 1, 0)
        assert [(r.child, r.restarts_in_window) for r in drain(rx)] == [("a", 0)]


async def test_escalates_past_a_childs_intensity_and_cancels_the_rest(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        journal: list[str] = []
        a, b = Child("a", journal), Child("b", journal)
        policy = RestartPolicy(max_restarts=1, period_s=10)
        body_cancelled = False
        with pytest.raises(RestartIntensityExceeded) as caught:
            async with open_dynamic_supervisor(policy) as sup:
                await sup.start_child(a.spec())
                await sup.start_child(b.spec())
                b.press("crash")  # b: 1 restart (its own window)
                await settle()
                a.press("crash")  # a: 1 restart
                await settle()
                a.press("crash")  # a: 2 > 1
                try:
                    await trio.sleep_forever()
                except trio.Cancelled:
                    body_cancelled = True
                    raise
        assert caught.value.child == "a"
        assert isinstance(caught.value.__cause__, Boom)
        assert body_cancelled
        assert journal[-1] == "stop b"


async def test_start_failure_reaches_the_caller_only(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        a, bad = Child("a"), Child("bad", fail_start=frozenset({1}))
        async with open_dynamic_supervisor(GENEROUS) as sup:
            await sup.start_child(a.spec())
            with pytest.raises(Boom, match="bad failed to start"):
                await sup.start_child(bad.spec())
            assert "bad" not in sup
            assert sup.statistics() == DynamicSupervisorStatistics(1, 1, 0)
            a.press("return")


async def test_duplicate_active_name_is_rejected(autojump_clock: trio.testing.MockClock) -> None:
    with trio.fail_after(DEADLINE_S):
        a = Child("a")
        async with open_dynamic_supervisor(GENEROUS) as sup:
            await sup.start_child(a.spec())
            with pytest.raises(ValueError, match="already active"):
                await sup.start_child(a.spec())
            a.press("return")
        assert a.starts == 1


async def test_concurrent_starts_of_one_name_admit_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        gate = trio.Event()
        starts = 0

        async def slow(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            nonlocal starts
            starts += 1
            await gate.wait()
            task_status.started()

        errors: list[Exception] = []
        async with open_dynamic_supervisor(GENEROUS) as sup:
            spec = ChildSpec("x", slow)

            async def try_start() -> None:
                try:
                    await sup.start_child(spec)
                except ValueError as exc:
                    errors.append(exc)

            async with trio.open_nursery() as starters:
                starters.start_soon(try_start)
                starters.start_soon(try_start)
                await settle()
                gate.set()
            assert (starts, len(errors)) == (1, 1)
            sup.cancel_scope.cancel()


async def test_start_child_after_close_raises_runtime_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        async with open_dynamic_supervisor(GENEROUS) as sup:
            pass
        with pytest.raises(RuntimeError, match="closed"):
            await sup.start_child(Child("late").spec())
        assert "late" not in sup


async def test_body_error_propagates_bare_and_cancels_children(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        journal: list[str] = []
        a = Child("a", journal)
        with pytest.raises(KeyError):
            async with open_dynamic_supervisor(GENEROUS) as sup:
                await sup.start_child(a.spec())
                raise KeyError("body")
        assert journal == ["start a", "stop a"]
