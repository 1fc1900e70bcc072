"""Concurrent turns, the turn deadline and the give-up policy, in virtual time.

``A2A_AGENT_CONCURRENCY`` lets up to N Tasks hold turn authority at once (each Task
at most one turn, each turn's tools bound to its own Task); the 128-waiting bound,
retries, re-offer cap and replay are unchanged, and turns of one context stay in
order. ``A2A_TURN_TIMEOUT_MS`` cancels a turn past its deadline as a failed turn.
Design rule "Failure is visible": a wake whose turns keep failing is retried after
1 s, 2 s ... and, at the delivery cap, its Task ends FAILED with the reason.

The plane runs as in ``test_wake_gates.py`` (SQLite on the trio thread, MockClock
autojump); :class:`Agent` is given the concurrency, so only overlap beyond it (or two
turns of one Task) counts as a violation, and ``peak`` measures the overlap.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from taskplane.actors.admission_limits import WAKE_QUEUE_SIZE
from taskplane.actors.toolbox import TaskToolbox
from taskplane.actors.wake import MAX_WAKE_DELIVERIES, WAKE_RETRY_BASE_MS
from taskplane.actors.wake_turns import CAP_REASON, RECOVERY_BACKOFF_BASE_MS
from taskplane.bridge.settings import AgentSettings
from taskplane.errors import Overloaded, ToolError
from taskplane.model.enums import Role, TaskState
from tests.support.agent import Agent, Turn
from tests.support.crash import CrashButton
from tests.support.plane import open_test_plane
from tests.support.virtual import (
    ALICE,
    CANCELED,
    COMPLETED,
    SUBMITTED,
    WORKING,
    deliveries_of,
    events,
    evidence,
    journal,
    options,
    outputs,
    quiesce,
    send,
    settle,
    state_of,
    task_id_of,
)

FAILED = TaskState.TASK_STATE_FAILED


def concurrency(n: int, **extra: int) -> AgentSettings:
    return AgentSettings(concurrency=n, **extra)


async def test_n_turns_overlap_each_bound_to_its_own_task(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    agent = Agent(concurrency=4)
    async with open_test_plane(store_root, options(agent), concurrency(4)) as plane:
        ids = [task_id_of(await send(plane, f"block:g{n}", f"m-{n}")) for n in range(6)]
        await agent.wait_turns(4)
        await quiesce(5)
        assert agent.order() == ids[:4]  # FIFO; the fifth waits for a free slot
        stats = plane.wake.statistics()
        assert (stats.running_turns, stats.offered, stats.concurrency) == (4, 4, 4)
        assert stats.authorities == tuple(sorted(ids[:4])) and stats.authority is None
        assert stats.waiting == 2
        for task_id in ids[:4]:
            assert await state_of(plane, task_id) is WORKING
        for task_id in ids[4:]:
            assert await state_of(plane, task_id) is SUBMITTED

        # Each turn's tools act for its own Task only; a waiting Task has no authority.
        first, second = agent.turns[0], agent.turns[1]
        with pytest.raises(ToolError):
            await first.tools.a2a_complete_task(second.task_id, "not mine")
        waiting = TaskToolbox(ids[4], plane.owners, plane.wake, outputs())
        with pytest.raises(ToolError):
            await waiting.a2a_read_task(ids[4])
        assert await state_of(plane, second.task_id) is WORKING

        for n in reversed(range(6)):
            agent.open(f"g{n}")
        for task_id in ids:
            assert (await settle(plane, task_id)).status.state is COMPLETED
        # The four first turns ran side by side for the 5 virtual seconds.
        head = agent.turns[:4]
        assert max(t.started for t in head) + 5 <= min(t.ended or 0 for t in head)
        assert agent.peak == 4
        await quiesce()
        assert plane.wake.statistics().authorities == ()
    assert agent.violations == []


async def test_the_129th_wait_is_still_refused_at_concurrency_4(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    agent = Agent(concurrency=4)
    async with open_test_plane(store_root, options(agent), concurrency(4)) as plane:
        holders = [task_id_of(await send(plane, "block:hold", f"m-h{n}")) for n in range(4)]
        await agent.wait_turns(4)
        queued = [task_id_of(await send(plane, f"q {n}", f"m-q{n}")) for n in range(128)]
        assert plane.wake.statistics().waiting == WAKE_QUEUE_SIZE
        before = await journal(plane)
        with pytest.raises(Overloaded):
            await send(plane, "one too many", "m-over")
        assert await journal(plane) == before  # refused: nothing recorded

        agent.open("hold")
        await agent.wait_turns(4 + 128, ended=True)
        for task_id in [*holders, *queued]:
            assert (await settle(plane, task_id)).status.state is COMPLETED
        # Each ran once (FIFO among the offered is the queue model's property; turns
        # offered in one instant start in the scheduler's order).
        assert sorted(agent.order()[4:]) == sorted(queued)
        assert agent.peak == 4
    assert agent.violations == []


async def test_turns_of_one_context_stay_in_order_and_others_pass(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    agent = Agent(concurrency=4)
    async with open_test_plane(store_root, options(agent), concurrency(4)) as plane:
        head = await send(plane, "block:head", "m-head")
        assert head.task is not None
        await agent.wait_turns(1)
        sibling = task_id_of(
            await send(plane, "after head", "m-sibling", context_id=head.task.context_id)
        )
        other = task_id_of(await send(plane, "elsewhere", "m-other"))
        # Another context passes the busy one...
        assert (await settle(plane, other)).status.state is COMPLETED
        await quiesce(5)
        # ...but the next turn of the busy context waits for its predecessor.
        assert await state_of(plane, sibling) is SUBMITTED
        assert agent.order() == [head.task.id, other]

        agent.open("head")
        assert (await settle(plane, sibling)).status.state is COMPLETED
        assert agent.order() == [head.task.id, other, sibling]
        (before,), (after,) = agent.of(head.task.id), agent.of(sibling)
        assert before.ended is not None and after.started >= before.ended
    assert agent.violations == []


async def test_replay_keeps_the_order_of_one_context(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    first = Agent(concurrency=2)
    async with open_test_plane(store_root, options(first), concurrency(2)) as plane:
        head = await send(plane, "block:head", "m-head")
        assert head.task is not None
        await first.wait_turns(1)
        sibling = task_id_of(
            await send(plane, "after head", "m-sibling", context_id=head.task.context_id)
        )
        await quiesce()

    second = Agent(concurrency=2)
    async with open_test_plane(store_root, options(second), concurrency(2)) as plane:
        await second.wait_turns(1)
        await quiesce(5)
        assert second.order() == [head.task.id]  # a free slot, but the context is busy
        assert await state_of(plane, sibling) is SUBMITTED
        second.open("head")
        assert (await settle(plane, sibling)).status.state is COMPLETED
        assert second.order() == [head.task.id, sibling]
    assert second.violations == []


async def test_cancel_stops_only_its_own_turn_among_concurrent_ones(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    agent = Agent(concurrency=3)
    async with open_test_plane(store_root, options(agent), concurrency(3)) as plane:
        ids = [task_id_of(await send(plane, f"block:g{n}", f"m-{n}")) for n in range(3)]
        await agent.wait_turns(3)
        canceled = await plane.owners.cancel(ids[1], ALICE)
        assert canceled.status.state is CANCELED
        await quiesce()
        assert [t.outcome for t in agent.turns] == ["running", "cancelled", "running"]
        assert plane.wake.statistics().authorities == tuple(sorted([ids[0], ids[2]]))
        for n in range(3):
            agent.open(f"g{n}")
        for task_id in (ids[0], ids[2]):
            assert (await settle(plane, task_id)).status.state is COMPLETED
        await quiesce(60)
        assert await state_of(plane, ids[1]) is CANCELED
        assert len(agent.of(ids[1])) == 1  # a canceled turn is over, not retried
    assert agent.violations == []


async def test_a_crashed_wake_actor_reoffers_every_running_turn(
    store_root: Path,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    button, agent = CrashButton(), Agent(concurrency=3)
    plane_options = options(agent, crash_hook=button)
    async with open_test_plane(store_root, plane_options, concurrency(3)) as plane:
        a = task_id_of(await send(plane, "block:a", "m-a"))
        b = task_id_of(await send(plane, "block:b", "m-b"))
        await agent.wait_turns(2)
        button.arm("wake")
        c = task_id_of(await send(plane, "third", "m-c"))  # its delivery crashes the actor
        assert (await settle(plane, c)).status.state is COMPLETED
        await quiesce()
        assert [r.actor for r in events(caplog, "actor_crashed")] == ["wake"]  # type: ignore[attr-defined]
        assert [t.outcome for t in agent.of(a)] == ["cancelled", "running"]
        assert [t.outcome for t in agent.of(b)] == ["cancelled", "running"]
        agent.open("a")
        agent.open("b")
        for task_id in (a, b):
            assert (await settle(plane, task_id)).status.state is COMPLETED
            rows = await journal(plane, task_id=task_id)
            assert [k for k, _, _ in rows].count("WOKEN") == 1
            assert deliveries_of(rows, rows[0][1]) == [1, 2]
    assert agent.violations == []


async def test_a_turn_past_its_deadline_is_cancelled_and_counted_as_failed(
    store_root: Path,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent = Agent()
    settings = AgentSettings(turn_timeout_ms=1_000)
    async with open_test_plane(store_root, options(agent), settings) as plane:
        task_id = task_id_of(await send(plane, "block:never", "m-1"))
        hung = await send(plane, "waits behind it", "m-2")
        await agent.wait_turns(2)
        first = agent.turns[0]
        assert first.outcome == "cancelled" and first.ended is not None
        assert first.ended - first.started == pytest.approx(1.0)
        # Retried as a failed turn (the first retry comes after 10 ms).
        assert agent.turns[1].task_id == task_id
        assert agent.turns[1].started - first.ended == pytest.approx(WAKE_RETRY_BASE_MS / 1000)
        timed = events(caplog, "a2a_turn_timed_out")
        assert [(r.taskId, r.timeoutMs) for r in timed] == [(task_id, 1_000)]  # type: ignore[attr-defined]

        # Every delivery times out: the Task ends FAILED, saying why, and the Task
        # behind it runs afterwards.
        task = await settle(plane, task_id)
        assert task.status.state is FAILED
        assert task.status.message is not None
        assert "deadline" in (task.status.message.parts[0].text or "")
        assert (await settle(plane, task_id_of(hung))).status.state is COMPLETED
        assert plane.wake.statistics().timeouts == MAX_WAKE_DELIVERIES
        assert [t.outcome for t in agent.of(task_id)] == ["cancelled"] * MAX_WAKE_DELIVERIES


async def test_a_failing_task_is_retried_later_then_failed_with_the_reason(
    store_root: Path,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Design rule "Failure is visible": 3 turns 10 and 20 ms apart, then recovery
    turns after 1 s and 2 s; the fifth delivery's failure gives up: WAKE_FAILED,
    evidence and FAILED (with the reason) in one commit; a blocking wait settles."""
    agent = Agent()
    async with open_test_plane(store_root, options(agent)) as plane:
        accepted = await send(plane, "fail", "m-1")
        task_id, activation = task_id_of(accepted), accepted.activation_id
        with trio.fail_after(60):
            task = await plane.wait_settled(ALICE, task_id, 0)  # a blocking send's wait
        assert task.status.state is FAILED
        assert task.status.message is not None and task.status.message.role is Role.ROLE_AGENT
        text = task.status.message.parts[0].text or ""
        assert "its turn failed 5 times" in text and "RuntimeError: turn 5 of" in text

        starts = [t.started for t in agent.of(task_id)]
        base, pause = WAKE_RETRY_BASE_MS / 1000, RECOVERY_BACKOFF_BASE_MS / 1000
        quick = base + 2 * base
        assert [s - starts[0] for s in starts] == pytest.approx(
            [0, base, quick, quick + pause, quick + pause + 2 * pause], abs=1e-9
        )
        rows = await journal(plane, task_id=task_id)
        assert deliveries_of(rows, activation) == [1, 2, 3, 4, 5]
        failed = [r for k, a, r in rows if k == "WAKE_FAILED" and a == activation]
        assert [(r["attempts"], r["error"]) for r in failed] == [(MAX_WAKE_DELIVERIES, CAP_REASON)]
        unhealthy = await evidence(plane, "activation.unhealthy")
        assert len(unhealthy) == 3  # two pauses, then the give-up
        assert "the last turn failed" in unhealthy[-1]["error"]
        paused = events(caplog, "a2a_task_turn_paused")
        assert [r.retryInS for r in paused] == [1.0, 2.0]  # type: ignore[attr-defined]
        assert len(events(caplog, "a2a_wake_abandoned")) == 1
        assert agent.released == [task_id] * 3
        assert plane.wake.statistics().paused == 0

    again = Agent()
    async with open_test_plane(store_root, options(again)) as plane:
        await quiesce(60)
        assert again.turns == []  # given up: not replayed
        assert await state_of(plane, task_id) is FAILED


async def test_a_recovery_turn_that_succeeds_completes_without_a_restart(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async def flaky(agent: Agent, turn: Turn) -> None:
        if turn.n <= 3:
            raise RuntimeError("provider down")
        await turn.tools.a2a_complete_task(turn.task_id, "back up")

    agent = Agent(script=flaky)
    async with open_test_plane(store_root, options(agent)) as plane:
        task_id = task_id_of(await send(plane, "anything", "m-1"))
        assert (await settle(plane, task_id)).status.state is COMPLETED
        assert len(agent.of(task_id)) == 4
        assert agent.turns[3].started - agent.turns[2].started == pytest.approx(1.0)
        assert [k for k, _, _ in await journal(plane) if k == "WAKE_FAILED"] == []
