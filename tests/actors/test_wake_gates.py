"""The wake-queue gates, in virtual time.

Upstream test titles from CONTRACTS.md §i (``tests/task-plane-runtime.test.ts``), kept
by name in snake_case, plus the wake rules of the design document ("Wake authority
begins at delivery", "Wake recovery follows durable Task state", "Wake admission is
bounded") and CONTRACTS.md §e.

Every plane here runs with ``store_in_thread=False`` under pytest-trio's
``autojump_clock``: SQLite runs on the trio thread, so sleeps, retries and backoffs
take exact virtual time. The agent is :class:`tests.support.agent.Agent`, a test
runtime that logs each turn with ``trio.current_time()`` and acts on the newest user
message (see :func:`tests.support.agent.behave`). Durable facts are read from the store
itself (journal and evidence rows, :mod:`tests.support.virtual`), never from the
runtime's log alone.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from taskplane.actors.admission_limits import WAKE_QUEUE_SIZE
from taskplane.actors.plane import TaskPlane
from taskplane.actors.toolbox import TaskToolbox
from taskplane.actors.wake import (
    MAX_TURN_ATTEMPTS,
    MAX_WAKE_DELIVERIES,
    PUMP_RETRY_CAP_MS,
    WAKE_RETRY_BASE_MS,
)
from taskplane.actors.wake_queue import Wake
from taskplane.actors.wake_turns import RECOVERY_BACKOFF_BASE_MS
from taskplane.bridge.tool_api import TaskTools
from taskplane.errors import (
    InvalidRequest,
    Overloaded,
    StoreUnavailable,
    ToolError,
    UnsupportedOperation,
)
from taskplane.model.enums import Role, TaskState
from taskplane.model.types import Part, Task
from tests.store.faults import Faults, faulty_connection
from tests.support.agent import Agent, Turn, behave, user_text
from tests.support.plane import open_test_plane
from tests.support.virtual import (
    ALICE,
    CANCELED,
    COMPLETED,
    INPUT_REQUIRED,
    SUBMITTED,
    WORKING,
    deliveries_of,
    events,
    evidence,
    journal,
    kinds_of,
    message,
    options,
    outputs,
    quiesce,
    send,
    settle,
    state_of,
    task_id_of,
)

# --- upstream gates ----------------------------------------------------------------------


async def test_fifo_wakes_only_after_accepted(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    agent, faults = Agent(), Faults()
    seen: dict[str, list[str]] = {}

    async def observe(turn: Turn) -> None:
        # What the durable journal says at the moment the agent is prompted.
        assert agent.plane is not None
        rows = await journal(agent.plane, task_id=turn.task_id)
        seen[turn.task_id] = [k for k, _, _ in rows]

    agent.observe = observe
    plane_options = options(agent, connection_factory=faulty_connection(faults))
    async with open_test_plane(store_root, plane_options) as plane:
        agent.plane = plane
        first = task_id_of(await send(plane, "block:first", "m-0"))
        await agent.wait_turns(1)
        queued = [task_id_of(await send(plane, f"work {n}", f"m-{n}")) for n in range(1, 6)]
        # A send whose acceptance does not commit is never woken.
        faults.commit = True
        with pytest.raises(StoreUnavailable):
            await send(plane, "never accepted", "m-lost")
        faults.commit = False
        await quiesce(5)
        assert agent.order() == [first]  # nothing runs beside the offered turn
        for task_id in queued:
            assert await state_of(plane, task_id) is SUBMITTED
            assert seen.get(task_id) is None
            assert [k for k, _, _ in await journal(plane, task_id=task_id)] == [
                "CLAIM",
                "ACCEPTED",
            ]

        agent.open("first")
        for task_id in queued:
            assert (await settle(plane, task_id)).status.state is COMPLETED
        assert agent.order() == [first, *queued]  # FIFO, in acceptance order
        for task_id in [first, *queued]:
            assert seen[task_id] == ["CLAIM", "ACCEPTED", "WOKEN", "WAKE_DELIVERED"]
        page = await plane.list_tasks(
            ALICE, context_id=None, state=None, status_after=None, page_size=100, page_token=None
        )
        assert page.total_size == 6
        assert not [r for k, _, r in await journal(plane) if k == "CLAIM" and "m-lost" in str(r)]
    assert agent.violations == []


async def test_authority_granted_at_delivery(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    agent = Agent()
    at_delivery: dict[str, Any] = {}

    async def observe(turn: Turn) -> None:
        assert agent.plane is not None
        at_delivery[turn.task_id] = (
            agent.plane.wake.authority,
            await state_of(agent.plane, turn.task_id),
            [k for k, _, _ in await journal(agent.plane, task_id=turn.task_id)],
        )

    agent.observe = observe
    async with open_test_plane(store_root, options(agent)) as plane:
        agent.plane = plane
        holder = task_id_of(await send(plane, "block:holder", "m-holder"))
        await agent.wait_turns(1)
        waiting = task_id_of(await send(plane, "waiting", "m-waiting"))
        await quiesce()

        # Queued is not authorized: no WORKING, no WOKEN, and the tools refuse it.
        assert plane.wake.authority == holder
        assert await state_of(plane, waiting) is SUBMITTED
        assert [k for k, _, _ in await journal(plane, task_id=waiting)] == ["CLAIM", "ACCEPTED"]
        early = TaskToolbox(waiting, plane.owners, plane.wake, outputs())
        with pytest.raises(ToolError):
            await early.a2a_read_task(waiting)
        with pytest.raises(ToolError):
            await early.a2a_complete_task(waiting, "too early")
        with pytest.raises(ToolError):
            await early.a2a_require_input(waiting, "too early?")
        with pytest.raises(ToolError):
            await early.a2a_record_output(waiting, "pull-request", {"n": 1})
        before = await plane.get_task(ALICE, waiting)
        assert before.status.state is SUBMITTED and before.artifacts == ()
        assert len(before.history) == 1

        agent.open("holder")
        await settle(plane, waiting)
        # At the prompt the Task already held the authority, was WORKING, and WOKEN
        # had been recorded (with its delivery), in that order, before the prompt.
        assert at_delivery[holder] == (
            holder,
            WORKING,
            ["CLAIM", "ACCEPTED", "WOKEN", "WAKE_DELIVERED"],
        )
        assert at_delivery[waiting] == (
            waiting,
            WORKING,
            ["CLAIM", "ACCEPTED", "WOKEN", "WAKE_DELIVERED"],
        )
        await quiesce()
        assert plane.wake.authority is None  # cleared once the turn is over


async def test_exactly_one_reoffer_after_crash_post_woken(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    first = Agent()
    async with open_test_plane(store_root, options(first)) as plane:
        task_id = task_id_of(accepted := await send(plane, "block:never", "m-1"))
        activation = accepted.activation_id
        await first.wait_turns(1)
        rows = await journal(plane, task_id=task_id)
        assert kinds_of(rows, activation) == ["CLAIM", "ACCEPTED", "WOKEN", "WAKE_DELIVERED"]
    # The process stopped mid-turn (WOKEN recorded, the turn never finished).
    assert first.of(task_id)[0].outcome == "cancelled"

    second = Agent()
    async with open_test_plane(store_root, options(second)) as plane:
        second.open("never")
        assert (await settle(plane, task_id)).status.state is COMPLETED
        await quiesce(60)
        assert second.order() == [task_id]  # re-offered exactly once
        rows = await journal(plane, task_id=task_id)
        assert kinds_of(rows, activation).count("WOKEN") == 1
        assert deliveries_of(rows, activation) == [1, 2]

    third = Agent()
    async with open_test_plane(store_root, options(third)) as plane:
        await quiesce(60)
        assert third.turns == []  # settled: never offered again
        assert deliveries_of(await journal(plane, task_id=task_id), activation) == [1, 2]


async def test_unanswered_input_required_preserved_on_replay(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    first = Agent()
    async with open_test_plane(store_root, options(first)) as plane:
        task_id = task_id_of(await send(plane, "ask:Which colour?", "m-1"))
        asked = await settle(plane, task_id)
        assert asked.status.state is INPUT_REQUIRED

    second = Agent()
    async with open_test_plane(store_root, options(second)) as plane:
        await quiesce(60)
        assert second.turns == []  # the question is not re-offered
        waiting = await plane.get_task(ALICE, task_id)
        assert waiting.status.state is INPUT_REQUIRED
        assert waiting.status.message is not None
        assert user_text(waiting) == "ask:Which colour?"
        assert [p.text for p in waiting.status.message.parts] == ["Which colour?"]
        assert waiting.history == asked.history

        # A newly accepted continuation starts normally.
        answer = await send(plane, "blue", "m-2", task_id=task_id)
        assert answer.disposition == "continued"
        done = await settle(plane, task_id)
        assert done.status.state is COMPLETED
        assert second.order() == [task_id]
        rows = await journal(plane, task_id=task_id)
        assert deliveries_of(rows, answer.activation_id) == [1]
        assert [m.role for m in done.history] == [Role.ROLE_USER, Role.ROLE_AGENT, Role.ROLE_USER]


async def test_terminal_replay_claims_dont_count_toward_the_bound(
    store_root: Path,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # 1: 100 accepted activations whose Tasks were canceled before any wake.
    first = Agent()
    async with open_test_plane(store_root, options(first)) as plane:
        holder = task_id_of(await send(plane, "block:hold", "m-holder"))
        await first.wait_turns(1)
        canceled = [task_id_of(await send(plane, f"c {n}", f"m-c{n}")) for n in range(100)]
        for task_id in canceled:
            await plane.cancel(ALICE, task_id)
    # 2: the holder is replayed; 127 more wait behind it (not yet woken).
    second = Agent()
    async with open_test_plane(store_root, options(second)) as plane:
        await second.wait_turns(1)
        assert second.order() == [holder]
        waiting = [task_id_of(await send(plane, f"w {n}", f"m-w{n}")) for n in range(127)]
    assert len(first.turns) == 1 and len(second.turns) == 1

    # 3: 128 eligible plus 100 terminal claims: the terminal ones are filtered out
    # before admission, so nothing overflows.
    caplog.clear()
    third = Agent()
    async with open_test_plane(store_root, options(third)) as plane:
        third.open("hold")
        await third.wait_turns(128, ended=True)
        await quiesce(60)
        assert third.order() == [holder, *waiting]
        assert events(caplog, "a2a_wake_overflow") == []
        assert [k for k, _, _ in await journal(plane) if k == "WAKE_FAILED"] == []
        replayed = events(caplog, "wakes_replayed")
        assert [r.count for r in replayed] == [128]  # type: ignore[attr-defined]
        for task_id in canceled:
            assert await state_of(plane, task_id) is CANCELED
            assert "WOKEN" not in [k for k, _, _ in await journal(plane, task_id=task_id)]


async def test_transport_failure_backoff_and_durable_failure(
    store_root: Path,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Here: a task-session turn failure ([v1.10]): 3 turns with backoff, then unhealthy
    evidence, no WAKE_FAILED, the Task stays WORKING (paused: its recovery turn comes
    after ``RECOVERY_BACKOFF_BASE_MS``) and a restart replays it."""
    agent = Agent()
    async with open_test_plane(store_root, options(agent)) as plane:
        accepted = await send(plane, "fail", "m-1")
        task_id, activation = task_id_of(accepted), accepted.activation_id
        await agent.wait_turns(MAX_TURN_ATTEMPTS, ended=True)
        # Short of the recovery pause (1 s after the third failure).
        await quiesce(RECOVERY_BACKOFF_BASE_MS / 1000 / 2)
        turns = agent.of(task_id)
        assert len(turns) == MAX_TURN_ATTEMPTS == 3
        assert all(t.outcome == "raised" for t in turns)
        t0 = turns[0].started
        base_s = WAKE_RETRY_BASE_MS / 1000
        assert [t.started - t0 for t in turns] == pytest.approx(
            [0.0, base_s, base_s + 2 * base_s], abs=1e-9
        )  # t, t+10 ms, t+10+20 ms

        unhealthy = await evidence(plane, "activation.unhealthy")
        assert [(e["activationId"], e["taskId"]) for e in unhealthy] == [(activation, task_id)]
        assert "turn failed 3 times" in unhealthy[0]["error"]
        rows = await journal(plane, task_id=task_id)
        assert "WAKE_FAILED" not in kinds_of(rows, activation)
        assert deliveries_of(rows, activation) == [1, 2, 3]
        assert await state_of(plane, task_id) is WORKING
        assert agent.released == [task_id]  # the live session is closed
        assert len(events(caplog, "a2a_wake_failed")) == 3
        assert len(events(caplog, "a2a_task_turn_paused")) == 1

    # The activation stays replayable: a restart offers it to the new runtime.
    healed = Agent(script=complete_anyway)
    async with open_test_plane(store_root, options(healed)) as plane:
        assert (await settle(plane, task_id)).status.state is COMPLETED
        assert healed.order() == [task_id]
        assert deliveries_of(await journal(plane, task_id=task_id), activation) == [1, 2, 3, 4]


async def complete_anyway(agent: Agent, turn: Turn) -> None:
    await turn.tools.a2a_complete_task(turn.task_id, "done after all")


async def test_delivery_cap_then_a_fresh_event_still_accepted(
    store_root: Path,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent = Agent()
    async with open_test_plane(store_root, options(agent)) as plane:
        stuck = await plane.ingest(ALICE, "spool", "event-1", "thread-1", [Part.from_text("idle")])
        task_id, activation = task_id_of(stuck), stuck.activation_id
        await agent.wait_turns(MAX_WAKE_DELIVERIES, ended=True)
        await quiesce(60)
        assert [t.outcome for t in agent.of(task_id)] == ["returned"] * MAX_WAKE_DELIVERIES

        rows = await journal(plane, task_id=task_id)
        assert deliveries_of(rows, activation) == [1, 2, 3, 4, 5]
        failed = [r for k, a, r in rows if k == "WAKE_FAILED" and a == activation]
        assert len(failed) == 1
        assert failed[0]["attempts"] == MAX_WAKE_DELIVERIES
        assert failed[0]["error"] == "delivery cap reached without settlement"
        unhealthy = await evidence(plane, "activation.unhealthy")
        assert [(e["activationId"], e["error"]) for e in unhealthy] == [
            (activation, "delivery cap reached without settlement")
        ]
        assert len(events(caplog, "a2a_wake_abandoned")) == 1
        # Failure is visible: given up on, the Task is FAILED with the reason, in the
        # commit that recorded WAKE_FAILED (the journal row and the state agree).
        given_up = await plane.get_task(ALICE, task_id)
        assert given_up.status.state is TaskState.TASK_STATE_FAILED
        assert given_up.status.message is not None
        assert given_up.status.message.role is Role.ROLE_AGENT
        assert "woken 5 times without finishing" in (given_up.status.message.parts[0].text or "")
        assert agent.released == [task_id]

        # The FAILED Task cannot be continued; a fresh event is new work and runs.
        with pytest.raises(UnsupportedOperation):
            await send(plane, "more", "m-continue", task_id=task_id)
        fresh = await plane.ingest(ALICE, "spool", "event-2", "thread-1", [Part.from_text("hi")])
        assert fresh.disposition == "created"
        fresh_id = task_id_of(fresh)
        assert fresh_id != task_id
        assert fresh.task is not None and stuck.task is not None
        assert fresh.task.context_id == stuck.task.context_id
        assert (await settle(plane, fresh_id)).status.state is COMPLETED
        a2a = task_id_of(await send(plane, "also new", "m-new"))
        assert (await settle(plane, a2a)).status.state is COMPLETED
        assert agent.order()[MAX_WAKE_DELIVERIES:] == [fresh_id, a2a]

    # Startup does not resurrect the capped activation.
    again = Agent()
    async with open_test_plane(store_root, options(again)) as plane:
        await quiesce(60)
        assert again.turns == []
        assert deliveries_of(await journal(plane, task_id=task_id), activation) == [1, 2, 3, 4, 5]


async def test_128_bound_with_overflow_evidence(
    store_root: Path,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """At most 128 wakes wait behind the offered turn. New work beyond that is refused
    at intake (503, nothing recorded), and a wake that still overflows (admitted by
    another path than intake's reservation) is logged, recorded as durable
    ``WAKE_FAILED`` evidence, and its never-started Task is failed with the reason."""
    agent = Agent()
    async with open_test_plane(store_root, options(agent)) as plane:
        holder = task_id_of(await send(plane, "block:hold", "m-holder"))
        await agent.wait_turns(1)
        queued = [task_id_of(await send(plane, f"q {n}", f"m-q{n}")) for n in range(128)]
        assert len(plane.wake.queue.pending) == WAKE_QUEUE_SIZE
        before = await journal(plane)

        for n in range(3):
            with pytest.raises(Overloaded) as refused:
                await send(plane, f"over {n}", f"m-over{n}")
            assert refused.value.retry_after_s == 1
        assert await journal(plane) == before  # refused: nothing recorded
        duplicate = await send(plane, "q 5", "m-q5")  # a retry of accepted work still answers
        assert duplicate.disposition == "duplicate"

        # The backstop: an accepted activation whose wake overflows anyway.
        act = plane.intake.intake.activation(ALICE, message("late", "m-late"), ())
        late = await plane.store.accept(act, plane.intake.intake.locator, 0)
        assert late.task is not None
        assert plane.wake.offer(Wake(late.activation_id, late.task.id)) is False
        await quiesce(1)
        logged = events(caplog, "a2a_wake_overflow")
        assert [r.activationId for r in logged] == [late.activation_id]  # type: ignore[attr-defined]
        failed = {a: r for k, a, r in await journal(plane) if k == "WAKE_FAILED"}
        assert set(failed) == {late.activation_id}
        assert failed[late.activation_id]["attempts"] == 0
        assert failed[late.activation_id]["error"] == "wake queue overflow"
        late_task = await plane.get_task(ALICE, late.task.id)
        assert late_task.status.state is TaskState.TASK_STATE_FAILED
        assert late_task.status.message is not None
        assert "128 tasks waiting" in (late_task.status.message.parts[0].text or "")
        assert len(plane.wake.queue.pending) == WAKE_QUEUE_SIZE

        agent.open("hold")
        await agent.wait_turns(1 + 128, ended=True)
        await quiesce(60)
        assert agent.order() == [holder, *queued]

    again = Agent()
    async with open_test_plane(store_root, options(again)) as plane:
        await quiesce(60)
        assert again.turns == []  # WAKE_FAILED is not replayed


@attrs.define
class LockedFaults(Faults):
    """``database is locked`` on the next ``locked_for`` BEGINs; records when."""

    locked_for: int = 0
    failed_at: list[float] = attrs.Factory(list)

    def check(self, sql: str) -> None:
        if self.locked_for > 0 and sql.lstrip().upper().startswith("BEGIN"):
            self.locked_for -= 1
            self.failed_at.append(trio.current_time())
            self.raised += 1
            raise sqlite3.OperationalError("database is locked")
        super().check(sql)


@pytest.mark.parametrize("failures", [1, 3, 9])
async def test_transient_io_auto_retry(
    store_root: Path,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
    failures: int,
) -> None:
    agent, faults = Agent(), LockedFaults()

    async def hold_after_completing(agent: Agent, turn: Turn) -> None:
        if turn.task_id == holder_box[0]:
            await turn.tools.a2a_complete_task(turn.task_id, "done")
            await agent.gate("hold").wait()  # the turn is still running
        else:
            await behave(agent, turn)

    holder_box: list[str] = []
    agent.script = hold_after_completing
    plane_options = options(agent, connection_factory=faulty_connection(faults))
    async with open_test_plane(store_root, plane_options) as plane:
        holder_box.append(task_id_of(await send(plane, "hold", "m-holder")))
        await agent.wait_turns(1)
        task_id = task_id_of(await send(plane, "eventually", "m-1"))
        # The store is locked for a while: the next pump (after the holder's turn)
        # fails on BEGIN and retries with capped exponential backoff.
        faults.locked_for = failures
        agent.open("hold")
        # Wait through the runtime's log: a subscription would need owner(T), which
        # cannot load while the store is locked (its caller gets ActorGone, a 503).
        await agent.wait_turns(2, ended=True)
        assert await state_of(plane, task_id) is COMPLETED

        assert len(faults.failed_at) == failures
        gaps = [b - a for a, b in zip(faults.failed_at, faults.failed_at[1:], strict=False)]
        expected = [
            min(WAKE_RETRY_BASE_MS * 2 ** (k - 1), PUMP_RETRY_CAP_MS) / 1000
            for k in range(1, failures + 1)
        ]
        assert gaps == pytest.approx(expected[:-1], abs=1e-9)
        (turn,) = agent.of(task_id)
        assert turn.started - faults.failed_at[-1] == pytest.approx(expected[-1], abs=1e-9)
        assert len(events(caplog, "a2a_wake_pump_failed")) == failures
        rows = await journal(plane, task_id=task_id)
        activation = rows[0][1]
        assert kinds_of(rows, activation).count("WOKEN") == 1
        assert deliveries_of(rows, activation) == [1]


async def test_a_working_task_cannot_be_claimed_again_mid_turn(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    agent = Agent()
    async with open_test_plane(store_root, options(agent)) as plane:
        accepted = await send(plane, "block:turn", "m-1")
        task_id = task_id_of(accepted)
        await agent.wait_turns(1)
        assert await state_of(plane, task_id) is WORKING
        before = await plane.get_task(ALICE, task_id)
        claims_before = [r for k, _, r in await journal(plane) if k == "CLAIM"]

        with pytest.raises(InvalidRequest):
            await send(plane, "me too", "m-2", task_id=task_id)
        # A redelivered duplicate returns the Task and wakes nothing.
        duplicate = await send(plane, "block:turn", "m-1")
        assert duplicate.disposition == "duplicate" and task_id_of(duplicate) == task_id
        await quiesce()
        assert not plane.wake.queue.pending
        assert list(plane.wake.queue.offered.values()) == [Wake(accepted.activation_id, task_id)]
        after = await plane.get_task(ALICE, task_id)
        assert after.history == before.history and after.status.state is WORKING
        assert [r for k, _, r in await journal(plane) if k == "CLAIM"] == claims_before

        agent.open("turn")
        assert (await settle(plane, task_id)).status.state is COMPLETED
        await quiesce(60)
        assert agent.order() == [task_id]


async def test_tools_enforce_active_authority(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    refused: list[str] = []
    stale_box: list[TaskTools] = []
    ids: dict[str, str] = {}

    async def script(agent: Agent, turn: Turn) -> None:
        tools, me = turn.tools, turn.task_id
        task: Task = (await tools.a2a_read_task(me)).details["task"]
        if user_text(task) != "mine":
            await behave(agent, turn)
            return
        other = ids["other"]  # queued behind this turn
        for name, call in [
            ("read", lambda: tools.a2a_read_task(other)),
            ("complete", lambda: tools.a2a_complete_task(other, "not mine")),
            ("output", lambda: tools.a2a_record_output(other, "pull-request", {"n": 1})),
            ("input", lambda: tools.a2a_require_input(other, "not mine?")),
        ]:
            try:
                await call()
            except ToolError:
                refused.append(name)
        # The queued Task's own toolbox is not valid before its delivery either.
        plane = agent.plane
        assert plane is not None
        queued = TaskToolbox(other, plane.owners, plane.wake, outputs())
        with pytest.raises(ToolError):
            await queued.a2a_complete_task(other, "not yet")
        await tools.a2a_record_output(me, "pull-request", {"url": "https://forge/pr/1"})
        await tools.a2a_complete_task(me, "mine")
        stale_box.append(tools)

    agent = Agent(script=script)
    async with open_test_plane(store_root, options(agent)) as plane:
        agent.plane = plane
        holder = task_id_of(await send(plane, "block:hold", "m-0"))
        await agent.wait_turns(1)
        mine = ids["mine"] = task_id_of(await send(plane, "mine", "m-1"))
        other = ids["other"] = task_id_of(await send(plane, "other", "m-2"))
        agent.open("hold")
        assert (await settle(plane, mine)).status.state is COMPLETED
        assert (await settle(plane, other)).status.state is COMPLETED
        assert agent.order() == [holder, mine, other]
        assert refused == ["read", "complete", "output", "input"]

        done = await plane.get_task(ALICE, mine)
        assert [a.name for a in done.artifacts] == ["pull-request", "response"]
        theirs = await plane.get_task(ALICE, other)
        assert [a.name for a in theirs.artifacts] == ["response"]
        assert [p.text for a in theirs.artifacts for p in a.parts] == ["other"]
        assert len(theirs.history) == 1

        # After the turn its toolbox is dead: authority cleared, Task terminal.
        (stale,) = stale_box
        with pytest.raises(ToolError):
            await stale.a2a_read_task(mine)
        with pytest.raises(ToolError):
            await stale.a2a_record_output(mine, "pull-request", {"url": "x"})
        assert (await plane.get_task(ALICE, mine)) == done

        # A source without a continuation method cannot pause on the caller.
        native_refused: list[str] = []

        async def native(agent: Agent, turn: Turn) -> None:
            try:
                await turn.tools.a2a_require_input(turn.task_id, "can you hear me?")
            except ToolError:
                native_refused.append(turn.task_id)
            await turn.tools.a2a_complete_task(turn.task_id, "completed instead")

        agent.script = native
        event = await plane.ingest(ALICE, "spool", "event-1", "thread", [Part.from_text("x")])
        assert (await settle(plane, task_id_of(event))).status.state is COMPLETED
        assert native_refused == [task_id_of(event)]


# --- more wake rules ----------------------------------------------------------------------


async def test_offering_the_same_wake_twice_runs_one_turn(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    agent = Agent()
    async with open_test_plane(store_root, options(agent)) as plane:
        holder = await send(plane, "block:hold", "m-0")
        await agent.wait_turns(1)
        queued = await send(plane, "once", "m-1")
        wake = Wake(queued.activation_id, task_id_of(queued))
        held = Wake(holder.activation_id, task_id_of(holder))
        assert plane.wake.offer(wake)  # already pending: a duplicate, ignored
        assert plane.wake.offer(held)  # already offered: a duplicate, ignored
        assert list(plane.wake.queue.pending) == [wake]

        agent.open("hold")
        assert (await settle(plane, wake.task_id)).status.state is COMPLETED
        # Offered again after it settled: retired without a turn.
        assert plane.wake.offer(wake)
        await quiesce(60)
        assert agent.order() == [held.task_id, wake.task_id]
        rows = await journal(plane, task_id=wake.task_id)
        assert kinds_of(rows, wake.activation_id).count("WOKEN") == 1
        assert deliveries_of(rows, wake.activation_id) == [1]


async def test_startup_replays_only_the_newest_accepted_activation_of_each_open_task(
    store_root: Path,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    first = Agent()
    async with open_test_plane(store_root, options(first)) as plane:
        answered = await send(plane, "ask:first question", "m-x1")
        x = task_id_of(answered)
        await settle(plane, x)
        y = task_id_of(await send(plane, "ask:never answered", "m-y1"))
        await settle(plane, y)
        z = task_id_of(await send(plane, "block:z", "m-z1"))
        await first.wait_turns(3)
        # X's answer is accepted but not yet woken (Z holds the turn).
        continuation = await send(plane, "the answer", "m-x2", task_id=x)
        assert continuation.disposition == "continued"
    assert first.order() == [x, y, z]

    caplog.clear()
    second = Agent()
    async with open_test_plane(store_root, options(second)) as plane:
        second.open("z")
        assert (await settle(plane, x)).status.state is COMPLETED
        assert (await settle(plane, z)).status.state is COMPLETED
        await quiesce(60)
        assert second.order() == [z, x]  # Y's question waits; X's old claim is not replayed
        assert [r.count for r in events(caplog, "wakes_replayed")] == [2]  # type: ignore[attr-defined]
        rows = await journal(plane, task_id=x)
        assert deliveries_of(rows, answered.activation_id) == [1]
        assert deliveries_of(rows, continuation.activation_id) == [1]
        assert await state_of(plane, y) is INPUT_REQUIRED

        reply = await send(plane, "now answered", "m-y2", task_id=y)
        assert reply.disposition == "continued"
        assert (await settle(plane, y)).status.state is COMPLETED
        assert second.order() == [z, x, y]


async def fill_queue(plane: TaskPlane, agent: Agent, *, turns_before: int) -> tuple[str, list[str]]:
    """A held turn (``block:hold``) plus 128 waiting Tasks: a full, legal wake queue."""
    holder = task_id_of(await send(plane, "block:hold", "m-holder"))
    await agent.wait_turns(turns_before + 1)
    waiting = [task_id_of(await send(plane, f"w {n}", f"m-w{n}")) for n in range(128)]
    return holder, waiting


async def test_a_full_queue_survives_a_restart_without_overflow(
    store_root: Path,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One offered turn plus 128 waiting is a legal queue; replaying it after a restart
    must not turn the last acknowledged wake into overflow ("Wake admission is bounded":
    at most 128 wait *behind the offered or active turn*)."""
    first = Agent()
    async with open_test_plane(store_root, options(first)) as plane:
        holder, waiting = await fill_queue(plane, first, turns_before=0)
        assert events(caplog, "a2a_wake_overflow") == []

    caplog.clear()
    second = Agent()
    async with open_test_plane(store_root, options(second)) as plane:
        second.open("hold")
        await second.wait_turns(128, ended=True)
        await quiesce(60)
        assert [r.count for r in events(caplog, "wakes_replayed")] == [129]  # type: ignore[attr-defined]
        assert events(caplog, "a2a_wake_overflow") == []
        assert [k for k, _, _ in await journal(plane) if k == "WAKE_FAILED"] == []
        assert second.order() == [holder, *waiting]


async def test_replay_restores_every_accepted_wake_even_over_the_bound(
    store_root: Path,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A Task paused after 3 failed turns stays replayable; with a full queue besides,
    130 accepted wakes are eligible at startup. Replay restores them all (the bound
    limits new intake, not work already acknowledged): no overflow, nothing failed."""
    first = Agent()
    async with open_test_plane(store_root, options(first)) as plane:
        paused = task_id_of(await send(plane, "fail", "m-paused"))
        await first.wait_turns(3, ended=True)
        await quiesce(1)
        holder, waiting = await fill_queue(plane, first, turns_before=3)
        assert events(caplog, "a2a_wake_overflow") == []

    caplog.clear()
    second = Agent()
    async with open_test_plane(store_root, options(second)) as plane:
        assert [r.count for r in events(caplog, "wakes_replayed")] == [130]  # type: ignore[attr-defined]
        second.open("hold")
        await quiesce(60)
        assert events(caplog, "a2a_wake_overflow") == []
        # Only the paused Task (still failing) reaches the delivery cap; nothing overflows.
        failed = await journal(plane)
        assert {r.get("error") for k, _, r in failed if k == "WAKE_FAILED"} <= {
            "delivery cap reached without settlement"
        }
        assert len([k for k, _, _ in failed if k == "WAKE_FAILED"]) <= 1
        ran = {t.task_id for t in second.turns}
        assert {holder, *waiting} <= ran
        assert paused in ran  # replayable after restart, as the design document says
        for task_id in waiting:
            assert await state_of(plane, task_id) is TaskState.TASK_STATE_COMPLETED
