"""supervise(): restart types, intensity window, backoff, start and cancel semantics."""

from __future__ import annotations

import logging
from itertools import pairwise

import pytest
import trio
import trio.testing

from taskplane.supervision import (
    LOGGER_NAME,
    ChildSpec,
    CrashReport,
    RestartIntensityExceeded,
    RestartPolicy,
    RestartType,
    supervise,
)
from tests.supervision.supervision_testkit import (
    DEADLINE_S,
    Boom,
    Child,
    attr,
    drain,
    events,
    settle,
)

GENEROUS = RestartPolicy(max_restarts=100, period_s=60)


@pytest.fixture(autouse=True)
def _capture_supervision_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER_NAME)


async def test_started_value_is_forwarded_once_and_restarts_reuse_the_spec(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        child = Child("a")
        async with trio.open_nursery() as nursery:
            assert await nursery.start(supervise, child.spec(), GENEROUS) == "a#1"
            for _ in range(3):
                child.press("crash")
                await settle()
            assert child.starts == 4  # three restarts, parent's start() answered once
            nursery.cancel_scope.cancel()


async def test_transient_normal_return_ends_supervision_without_restart(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        child = Child("a")
        async with trio.open_nursery() as nursery:
            await nursery.start(supervise, child.spec(RestartType.TRANSIENT), GENEROUS)
            child.press("crash")
            await settle()
            child.press("return")
        assert child.starts == 2  # restarted after the crash, not after the return


async def test_permanent_child_is_restarted_after_a_normal_return(
    caplog: pytest.LogCaptureFixture,
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        child = Child("a")
        async with trio.open_nursery() as nursery:
            await nursery.start(supervise, child.spec(RestartType.PERMANENT), GENEROUS)
            child.press("return")
            await settle()
            assert child.starts == 2
            nursery.cancel_scope.cancel()
        assert len(events(caplog, "actor_returned")) == 1
        assert events(caplog, "actor_crashed") == []  # a return is not a crash


async def test_permanent_returns_count_towards_intensity(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        child = Child("a")
        policy = RestartPolicy(max_restarts=2, period_s=10)
        with pytest.RaisesGroup(RestartIntensityExceeded):
            async with trio.open_nursery() as nursery:
                await nursery.start(supervise, child.spec(RestartType.PERMANENT), policy)
                for _ in range(3):
                    child.press("return")
                    await settle()
        assert child.starts == 3


async def test_temporary_child_is_never_restarted(autojump_clock: trio.testing.MockClock) -> None:
    with trio.fail_after(DEADLINE_S):
        tx, rx = trio.open_memory_channel[CrashReport](8)
        crashing, returning = Child("c"), Child("r")
        async with trio.open_nursery() as nursery:
            await nursery.start(supervise, crashing.spec(RestartType.TEMPORARY), GENEROUS, tx)
            await nursery.start(supervise, returning.spec(RestartType.TEMPORARY), GENEROUS, tx)
            crashing.press("crash")
            returning.press("return")
        assert (crashing.starts, returning.starts) == (1, 1)
        [report] = drain(rx)
        assert (report.child, report.restarts_in_window) == ("c", 0)
        assert report.error_type == f"{Boom.__module__}.Boom"


async def test_escalates_at_limit_plus_one_chained_from_the_last_crash(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        child = Child("owner")
        policy = RestartPolicy(max_restarts=2, period_s=10)
        with pytest.RaisesGroup(RestartIntensityExceeded) as caught:
            async with trio.open_nursery() as nursery:
                await nursery.start(supervise, child.spec(), policy)
                for _ in range(3):
                    child.press("crash")
                    await settle()
        [err] = caught.value.exceptions
        assert isinstance(err, RestartIntensityExceeded)
        assert (err.child, err.restarts_in_window, err.policy) == ("owner", 3, policy)
        assert isinstance(err.__cause__, Boom) and str(err.__cause__) == "owner crash #3"
        assert child.starts == 3


async def test_max_restarts_zero_escalates_on_first_crash(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        child = Child("a")
        with pytest.RaisesGroup(RestartIntensityExceeded):
            async with trio.open_nursery() as nursery:
                await nursery.start(supervise, child.spec(), RestartPolicy(max_restarts=0))
                child.press("crash")
        assert child.starts == 1


async def test_window_slides(autojump_clock: trio.testing.MockClock) -> None:
    """Crashes at 0, 6, 12 never hold 3 in 10 s; one more at 13 does (6, 12, 13)."""
    with trio.fail_after(DEADLINE_S):
        child = Child("a")
        policy = RestartPolicy(max_restarts=2, period_s=10)
        with pytest.RaisesGroup(RestartIntensityExceeded):
            async with trio.open_nursery() as nursery:
                await nursery.start(supervise, child.spec(), policy)
                start = trio.current_time()
                for at in (0, 6, 12, 13):
                    await trio.sleep_until(start + at)
                    child.press("crash")
                    await settle()
        assert child.starts == 4


async def test_window_edge_is_inclusive(autojump_clock: trio.testing.MockClock) -> None:
    """A restart exactly ``period_s`` ago is still in the window (as in OTP)."""
    with trio.fail_after(DEADLINE_S):
        child = Child("a")
        with pytest.RaisesGroup(RestartIntensityExceeded):
            async with trio.open_nursery() as nursery:
                await nursery.start(
                    supervise, child.spec(), RestartPolicy(max_restarts=1, period_s=5)
                )
                child.press("crash")
                await settle()
                await trio.sleep(5)
                child.press("crash")
                await settle()


async def test_backoff_delays_in_virtual_time(autojump_clock: trio.testing.MockClock) -> None:
    """Restart delays follow min(cap, base * 2**(n-1)) for n restarts in the window."""
    with trio.fail_after(DEADLINE_S):
        seen: list[float] = []

        async def flaky(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            seen.append(trio.current_time())
            task_status.started()
            if len(seen) <= 5:
                raise Boom(len(seen))

        policy = RestartPolicy(max_restarts=10, period_s=100, backoff_s=0.5, backoff_cap_s=3)
        await supervise(ChildSpec("flaky", flaky), policy)  # the 6th incarnation returns
        gaps = [b - a for a, b in pairwise(seen)]
        assert gaps == [0.5, 1.0, 2.0, 3.0, 3.0]


async def test_backoff_restarts_from_base_after_a_quiet_window(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        child = Child("a")
        policy = RestartPolicy(max_restarts=5, period_s=10, backoff_s=1, backoff_cap_s=8)
        async with trio.open_nursery() as nursery:
            await nursery.start(supervise, child.spec(), policy)
            for _ in range(2):
                child.press("crash")
                await trio.sleep(20)  # past the backoff and out of the window
            nursery.cancel_scope.cancel()
        gaps = [b - a for a, b in pairwise(child.start_times)]
        assert gaps == [1.0, 20.0]  # the second restart waited the base delay again


async def test_first_start_failure_propagates_to_the_starter(
    caplog: pytest.LogCaptureFixture,
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        child = Child("a", fail_start=frozenset({1}))
        async with trio.open_nursery() as nursery:
            with pytest.raises(Boom, match="failed to start #1"):
                await nursery.start(supervise, child.spec(), GENEROUS)
        assert child.starts == 1
        assert events(caplog, "actor_crashed") == []


async def test_later_start_failure_is_an_ordinary_crash(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        tx, rx = trio.open_memory_channel[CrashReport](8)
        child = Child("a", fail_start=frozenset({2}))
        async with trio.open_nursery() as nursery:
            await nursery.start(supervise, child.spec(), GENEROUS, tx)
            child.press("crash")
            await settle()
            assert child.starts == 3
            nursery.cancel_scope.cancel()
        assert [r.error_repr for r in drain(rx)] == [
            "Boom('a crash #1')",
            "Boom('a failed to start #2')",
        ]


@pytest.mark.parametrize("restart_type", list(RestartType))
async def test_first_incarnation_returning_before_started_is_an_error(
    restart_type: RestartType,
    autojump_clock: trio.testing.MockClock,
) -> None:
    starts = 0

    async def lazy(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        nonlocal starts
        starts += 1

    with trio.fail_after(DEADLINE_S):
        async with trio.open_nursery() as nursery:
            with pytest.raises(RuntimeError, match=r"'lazy' returned without calling"):
                await nursery.start(supervise, ChildSpec("lazy", lazy, restart_type), GENEROUS)
    assert starts == 1  # not restarted, even when PERMANENT


async def test_cancellation_is_never_a_crash(
    caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(DEADLINE_S):
        tx, rx = trio.open_memory_channel[CrashReport](8)
        child = Child("a")
        async with trio.open_nursery() as nursery:
            await nursery.start(supervise, child.spec(RestartType.PERMANENT), GENEROUS, tx)
            nursery.cancel_scope.cancel()
        assert child.journal == ["start a", "stop a"]
        assert drain(rx) == []
        assert [r for r in caplog.records if r.name == LOGGER_NAME] == []


async def test_crash_while_being_cancelled_propagates_unrestarted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        starts = 0

        async def messy(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            nonlocal starts
            starts += 1
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                raise Boom("cleanup failed")  # an error while being cancelled

        with pytest.RaisesGroup(Boom):
            async with trio.open_nursery() as nursery:
                await nursery.start(supervise, ChildSpec("messy", messy), GENEROUS)
                nursery.cancel_scope.cancel()
        assert starts == 1


async def test_crash_reports_once_per_crash_with_restart_counts(
    caplog: pytest.LogCaptureFixture,
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        tx, rx = trio.open_memory_channel[CrashReport](16)
        child = Child("a")
        policy = RestartPolicy(max_restarts=2, period_s=10)
        with pytest.RaisesGroup(RestartIntensityExceeded):
            async with trio.open_nursery() as nursery:
                await nursery.start(supervise, child.spec(), policy, tx)
                for _ in range(3):
                    child.press("crash")
                    await settle()
        reports = drain(rx)
        assert [(r.child, r.restarts_in_window, r.escalated) for r in reports] == [
            ("a", 1, False),
            ("a", 2, False),
            ("a", 3, True),
        ]
        assert {r.error_type for r in reports} == {f"{Boom.__module__}.Boom"}
        assert [r.error_repr for r in reports][-1] == "Boom('a crash #3')"

        crashed = events(caplog, "actor_crashed")
        assert [attr(r, "restarts_in_window") for r in crashed] == [1, 2, 3]
        assert all(r.levelno == logging.ERROR and r.exc_info for r in crashed)
        assert all(attr(r, "actor") == "a" for r in crashed)
        assert isinstance(crashed[0].exc_info[1], Boom)  # type: ignore[index]
        [escalated] = events(caplog, "actor_escalated")
        assert escalated.levelno == logging.ERROR
        assert (attr(escalated, "actor"), attr(escalated, "restarts_in_window")) == ("a", 3)


async def test_reports_never_block_a_restart_when_the_channel_is_full(
    caplog: pytest.LogCaptureFixture,
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        tx, rx = trio.open_memory_channel[CrashReport](1)  # never read during the test
        child = Child("a")
        async with trio.open_nursery() as nursery:
            await nursery.start(supervise, child.spec(), GENEROUS, tx)
            for _ in range(3):
                child.press("crash")
                await settle()
            assert child.starts == 4
            nursery.cancel_scope.cancel()
        assert [r.restarts_in_window for r in drain(rx)] == [1]
        assert len(events(caplog, "crash_report_dropped")) == 2
        assert len(events(caplog, "actor_crashed")) == 3  # the log misses nothing


async def test_reports_never_block_when_the_reader_is_gone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        tx, rx = trio.open_memory_channel[CrashReport](4)
        rx.close()
        child = Child("a")
        async with trio.open_nursery() as nursery:
            await nursery.start(supervise, child.spec(), GENEROUS, tx)
            child.press("crash")
            await settle()
            assert child.starts == 2
            nursery.cancel_scope.cancel()


async def test_supervise_can_be_awaited_directly(autojump_clock: trio.testing.MockClock) -> None:
    """``await supervise(...)`` works without a nursery (task_status ignored)."""
    with trio.fail_after(DEADLINE_S):
        child = Child("a")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(supervise, child.spec(), GENEROUS)
            await settle()
            child.press("return")
        assert child.starts == 1
