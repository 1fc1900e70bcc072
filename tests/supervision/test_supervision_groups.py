"""one_for_one, one_for_all, rest_for_one: who restarts, in what order, with what intensity."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from taskplane.supervision import (
    LOGGER_NAME,
    CrashReport,
    RestartIntensityExceeded,
    RestartPolicy,
    RestartType,
    one_for_all,
    one_for_one,
    rest_for_one,
)
from tests.supervision.supervision_testkit import DEADLINE_S, Boom, Child, drain, settle

GENEROUS = RestartPolicy(max_restarts=100, period_s=60)


@pytest.fixture(autouse=True)
def _capture_supervision_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER_NAME)


def trio_children(*names: str) -> tuple[list[str], list[Child]]:
    journal: list[str] = []
    return journal, [Child(name, journal) for name in names]


# --- one_for_one -------------------------------------------------------------------


async def test_one_for_one_restarts_only_the_crashed_child(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        journal, (a, b) = trio_children("a", "b")
        async with trio.open_nursery() as nursery:
            values = await nursery.start(one_for_one, [a.spec(), b.spec()], GENEROUS)
            assert values == ("a#1", "b#1")
            journal.clear()
            a.press("crash")
            await settle()
            assert journal == ["start a"]
            assert (a.starts, b.starts) == (2, 1)
            nursery.cancel_scope.cancel()


async def test_one_for_one_counts_intensity_per_child_and_escalation_cancels_siblings(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        journal, (a, b) = trio_children("a", "b")
        policy = RestartPolicy(max_restarts=1, period_s=10)

        async def drive() -> None:
            await settle()
            a.press("crash")  # a: 1 restart
            b.press("crash")  # b: 1 restart, in its own window
            await settle()
            assert (a.starts, b.starts) == (2, 2)
            a.press("crash")  # a: 2 > 1

        async with trio.open_nursery() as nursery:
            nursery.start_soon(drive)
            with pytest.raises(RestartIntensityExceeded) as caught:  # bare: collapsed group
                await one_for_one([a.spec(), b.spec()], policy)
        assert caught.value.child == "a"
        assert journal[-1] == "stop b"


async def test_one_for_one_returns_when_all_children_are_done(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        _, (a, b) = trio_children("a", "b")
        async with trio.open_nursery() as nursery:
            await nursery.start(one_for_one, [a.spec(), b.spec(RestartType.TEMPORARY)], GENEROUS)
            a.press("return")
            b.press("crash")
        assert (a.starts, b.starts) == (1, 1)


async def test_duplicate_names_are_rejected(autojump_clock: trio.testing.MockClock) -> None:
    with trio.fail_after(DEADLINE_S):
        a = Child("a")
        for helper in (one_for_one, one_for_all, rest_for_one):
            with pytest.raises(ValueError, match="duplicate child name 'a'"):
                await helper([a.spec(), a.spec()], GENEROUS)


# --- one_for_all -------------------------------------------------------------------


async def test_one_for_all_restarts_every_child_stop_reversed_start_in_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        journal, (a, b, c) = trio_children("a", "b", "c")
        specs = [a.spec(), b.spec(), c.spec()]
        async with trio.open_nursery() as nursery:
            assert await nursery.start(one_for_all, specs, GENEROUS) == ("a#1", "b#1", "c#1")
            assert journal == ["start a", "start b", "start c"]
            journal.clear()
            b.press("crash")
            await settle()
            assert journal == ["stop c", "stop a", "start a", "start b", "start c"]
            assert (a.starts, b.starts, c.starts) == (2, 2, 2)
            nursery.cancel_scope.cancel()


async def test_one_for_all_simultaneous_crashes_make_one_group_restart(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tx, rx = trio.open_memory_channel[CrashReport](8)
    journal, (a, b) = trio_children("a", "b")
    with trio.fail_after(DEADLINE_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(one_for_all, [a.spec(), b.spec()], GENEROUS, tx)
            journal.clear()
            a.press("crash")
            b.press("crash")  # both end before the supervisor acts on either
            await settle()
            assert journal == ["start a", "start b"]  # one restart of the group
            nursery.cancel_scope.cancel()
    # both crashes are reported; whichever the supervisor saw second (trio does not fix
    # the order) asked for no second restart and counted nothing
    reports = drain(rx)
    assert sorted((r.child, r.restarts_in_window) for r in reports) == [("a", 1), ("b", 1)]


async def test_one_for_all_counts_intensity_for_the_group(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        _, (a, b, c) = trio_children("a", "b", "c")
        tx, rx = trio.open_memory_channel[CrashReport](8)
        policy = RestartPolicy(max_restarts=2, period_s=10)
        with pytest.RaisesGroup(RestartIntensityExceeded) as caught:
            async with trio.open_nursery() as nursery:
                await nursery.start(one_for_all, [a.spec(), b.spec(), c.spec()], policy, tx)
                for child in (a, b, c):  # one crash each: three for the group
                    child.press("crash")
                    await settle()
        [err] = caught.value.exceptions
        assert isinstance(err, RestartIntensityExceeded) and err.child == "c"
        assert isinstance(err.__cause__, Boom)
        assert [(r.child, r.restarts_in_window, r.escalated) for r in drain(rx)] == [
            ("a", 1, False),
            ("b", 2, False),
            ("c", 3, True),
        ]


async def test_one_for_all_drops_a_returned_transient_child_without_restarts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        journal, (a, b) = trio_children("a", "b")
        async with trio.open_nursery() as nursery:
            await nursery.start(one_for_all, [a.spec(), b.spec()], GENEROUS)
            journal.clear()
            a.press("return")
            await settle()
            assert journal == []  # b untouched
            b.press("crash")
            await settle()
            assert journal == ["start b"]  # a is gone for good
            b.press("return")
        assert (a.starts, b.starts) == (1, 2)


async def test_one_for_all_restarts_on_a_permanent_return(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        journal, (a, b) = trio_children("a", "b")
        async with trio.open_nursery() as nursery:
            await nursery.start(one_for_all, [a.spec(RestartType.PERMANENT), b.spec()], GENEROUS)
            journal.clear()
            a.press("return")
            await settle()
            assert journal == ["stop b", "start a", "start b"]
            nursery.cancel_scope.cancel()


async def test_one_for_all_never_restarts_a_temporary_child(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        journal, (a, t) = trio_children("a", "t")
        async with trio.open_nursery() as nursery:
            await nursery.start(one_for_all, [a.spec(), t.spec(RestartType.TEMPORARY)], GENEROUS)
            journal.clear()
            a.press("crash")  # t is stopped by the group restart and dropped
            await settle()
            assert journal == ["stop t", "start a"]
            a.press("return")
        assert t.starts == 1


async def test_one_for_all_temporary_crash_restarts_nobody(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        tx, rx = trio.open_memory_channel[CrashReport](8)
        journal, (a, t) = trio_children("a", "t")
        async with trio.open_nursery() as nursery:
            await nursery.start(
                one_for_all, [a.spec(), t.spec(RestartType.TEMPORARY)], GENEROUS, tx
            )
            journal.clear()
            t.press("crash")
            await settle()
            assert journal == []
            a.press("return")
        assert [(r.child, r.restarts_in_window) for r in drain(rx)] == [("t", 0)]


async def test_one_for_all_failed_restart_counts_as_a_crash(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        tx, rx = trio.open_memory_channel[CrashReport](8)
        journal: list[str] = []
        a, b = Child("a", journal), Child("b", journal, fail_start=frozenset({2}))
        async with trio.open_nursery() as nursery:
            await nursery.start(one_for_all, [a.spec(), b.spec()], GENEROUS, tx)
            journal.clear()
            a.press("crash")
            await settle()
            # b's restart failed: that is a crash of b, so the group restarts again
            assert journal == ["stop b", "start a", "start b", "stop a", "start a", "start b"]
            nursery.cancel_scope.cancel()
        assert [(r.child, r.restarts_in_window) for r in drain(rx)] == [("a", 1), ("b", 2)]


async def test_group_first_start_failure_propagates_and_stops_started_children(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        journal: list[str] = []
        a, b = Child("a", journal), Child("b", journal, fail_start=frozenset({1}))
        with pytest.raises(Boom, match="b failed to start #1"):
            await one_for_all([a.spec(), b.spec()], GENEROUS)
        assert journal == ["start a", "start b", "stop a"]


class Messy(Child):
    """A child whose cleanup fails when it is cancelled."""

    async def run(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await super().run(task_status=task_status)
        except trio.Cancelled:
            raise Boom(f"{self.name} cleanup failed") from None


async def test_group_error_while_cancelled_from_outside_propagates(
    autojump_clock: trio.testing.MockClock,
) -> None:
    a, messy = Child("a"), Messy("m")
    with trio.fail_after(DEADLINE_S), pytest.RaisesGroup(pytest.RaisesExc(Boom, match="m cleanup")):
        async with trio.open_nursery() as nursery:
            await nursery.start(one_for_all, [a.spec(), messy.spec()], GENEROUS)
            nursery.cancel_scope.cancel()
    assert (a.starts, messy.starts) == (1, 1)


async def test_group_error_while_stopped_for_a_restart_ends_the_group(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal: list[str] = []
    a, messy = Child("a", journal), Messy("m", journal)
    with trio.fail_after(DEADLINE_S), pytest.RaisesGroup(pytest.RaisesExc(Boom, match="m cleanup")):
        async with trio.open_nursery() as nursery:
            await nursery.start(one_for_all, [a.spec(), messy.spec()], GENEROUS)
            a.press("crash")
            await settle()
    assert journal == ["start a", "start m", "stop m"]  # nothing restarted


# --- rest_for_one ------------------------------------------------------------------


async def test_rest_for_one_restarts_the_crashed_child_and_later_ones(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        journal, (a, b, c) = trio_children("a", "b", "c")
        async with trio.open_nursery() as nursery:
            await nursery.start(rest_for_one, [a.spec(), b.spec(), c.spec()], GENEROUS)
            journal.clear()
            b.press("crash")
            await settle()
            assert journal == ["stop c", "start b", "start c"]
            journal.clear()
            c.press("crash")
            await settle()
            assert journal == ["start c"]
            journal.clear()
            a.press("crash")
            await settle()
            assert journal == ["stop c", "stop b", "start a", "start b", "start c"]
            assert (a.starts, b.starts, c.starts) == (2, 3, 4)
            nursery.cancel_scope.cancel()


async def test_rest_for_one_escalation_cancels_earlier_children_too(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        journal, (a, b) = trio_children("a", "b")

        async def drive() -> None:
            await settle()
            b.press("crash")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(drive)
            with pytest.raises(RestartIntensityExceeded) as caught:
                await rest_for_one([a.spec(), b.spec()], RestartPolicy(max_restarts=0))
        assert caught.value.child == "b"
        assert journal == ["start a", "start b", "stop a"]
