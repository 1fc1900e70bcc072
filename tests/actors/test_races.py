"""Races between actors, forced deterministically (STYLE T-2, T-3) in virtual time.

Cancel against completion, a tool call against a cancel, concurrent first messages of
one conversation, a stalled subscriber beside a reading one, and owners that retire
when idle and restart on demand. Interleavings are forced with
``trio.testing.Sequencer`` and ``wait_all_tasks_blocked``; the plane runs with SQLite
on the trio thread under ``autojump_clock`` (see ``test_wake_gates.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from taskplane.actors.owner import SUBSCRIBER_BUFFER
from taskplane.actors.registry import OWNER_IDLE_S
from taskplane.errors import TaskNotCancelable, ToolError
from taskplane.model.enums import Role
from taskplane.model.types import Part, StreamResponse, Task
from taskplane.scope import Scope
from tests.support.agent import Agent, Turn, behave, user_text
from tests.support.plane import open_test_plane
from tests.support.virtual import (
    ALICE,
    CANCELED,
    COMPLETED,
    INPUT_REQUIRED,
    WORKING,
    deliveries_of,
    events,
    evidence,
    journal,
    kinds_of,
    options,
    quiesce,
    send,
    settle,
    state_of,
    task_id_of,
)

BETA = Scope("", "beta")


def frame_state(frame: StreamResponse) -> str | None:
    if frame.task is not None:
        return frame.task.status.state.name
    if frame.status_update is not None:
        return frame.status_update.status.state.name
    return None


async def drain(frames: trio.MemoryReceiveChannel[StreamResponse]) -> list[StreamResponse]:
    """Every frame until the stream closes (bounded: 60 virtual seconds)."""
    out: list[StreamResponse] = []
    with trio.fail_after(60):
        async with frames:
            async for frame in frames:
                out.append(frame)
    return out


TERMINAL_NAMES = {"TASK_STATE_COMPLETED", "TASK_STATE_CANCELED"}


def terminal_frames(frames: list[StreamResponse]) -> list[str]:
    return [s for f in frames if (s := frame_state(f)) in TERMINAL_NAMES]


# --- cancel against completion -----------------------------------------------------------


@pytest.mark.parametrize(
    "order", ["completion_settles_first", "completion_in_flight_first", "cancel_in_flight_first"]
)
async def test_cancel_racing_a_completion_leaves_exactly_one_terminal_state(
    store_root: Path, autojump_clock: trio.testing.MockClock, order: str
) -> None:
    """Both requests meet in owner(T)'s inbox; whichever is first wins, the other loses
    with TASK_NOT_CANCELABLE (cancel) or a ToolError / interruption (completion)."""
    seq = trio.testing.Sequencer()
    completion_first = order != "cancel_in_flight_first"
    outcome: dict[str, object] = {}

    async def racing_turn(agent: Agent, turn: Turn) -> None:
        async with seq(0):
            pass  # the turn holds the authority now
        try:
            if order == "completion_settles_first":
                async with seq(1):
                    await turn.tools.a2a_complete_task(turn.task_id, "finished")
            else:
                # The request is in owner(T)'s inbox before this task next yields.
                async with seq(1 if completion_first else 2):
                    pass
                await turn.tools.a2a_complete_task(turn.task_id, "finished")
            outcome["complete"] = "ok"
        except ToolError as exc:
            outcome["complete"] = exc
        except trio.Cancelled:
            outcome["complete"] = "interrupted"
            raise

    async def canceler(task_id: str) -> None:
        async with seq(2 if completion_first else 1):
            pass
        try:
            outcome["cancel"] = await plane.cancel(ALICE, task_id)
        except TaskNotCancelable as exc:
            outcome["cancel"] = exc

    agent = Agent(script=racing_turn)
    async with open_test_plane(store_root, options(agent)) as plane:
        accepted = await send(plane, "race", "m-1")
        task_id = task_id_of(accepted)
        frames = await plane.subscribe(ALICE, task_id)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(canceler, task_id)
            seen = await drain(frames)
        await quiesce(60)
        final = await plane.get_task(ALICE, task_id)

        if completion_first:
            assert outcome["complete"] == "ok"
            assert isinstance(outcome["cancel"], TaskNotCancelable)
            assert final.status.state is COMPLETED
            assert [(a.name, [p.text for p in a.parts]) for a in final.artifacts] == [
                ("response", ["finished"])
            ]
            assert agent.of(task_id)[0].outcome == "returned"
        else:
            assert isinstance(outcome["cancel"], Task)
            assert outcome["cancel"].status.state is CANCELED
            assert isinstance(outcome["complete"], ToolError) or outcome["complete"] == (
                "interrupted"
            )
            assert final.status.state is CANCELED
            assert final.artifacts == ()
        # One terminal state, durable and streamed once; history untouched by the loser.
        assert terminal_frames(seen) == [final.status.state.name]
        assert [m.role for m in final.history] == [Role.ROLE_USER]
        assert (await settle(plane, task_id)) == final
        assert plane.wake.authority is None
        assert agent.released == [task_id]
        rows = await journal(plane, task_id=task_id)
        assert kinds_of(rows, accepted.activation_id).count("WOKEN") == 1
        assert "WAKE_FAILED" not in kinds_of(rows, accepted.activation_id)
        assert await evidence(plane, "activation.unhealthy") == []  # not a failed turn


# --- a tool call against a cancel -----------------------------------------------------------


async def test_a_tool_call_racing_a_cancel_is_refused_and_the_turn_is_interrupted(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    late: dict[str, object] = {}

    async def stubborn_turn(agent: Agent, turn: Turn) -> None:
        task: Task = (await turn.tools.a2a_read_task(turn.task_id)).details["task"]
        if user_text(task) != "stubborn":
            await behave(agent, turn)
            return
        try:
            await agent.gate("never").wait()
        finally:
            # An agent that keeps going after it was interrupted: its tool calls fail.
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                tools = turn.tools
                for name, call in [
                    ("complete", lambda: tools.a2a_complete_task(turn.task_id, "late")),
                    ("output", lambda: tools.a2a_record_output(turn.task_id, "pull-request", {})),
                    ("input", lambda: tools.a2a_require_input(turn.task_id, "late?")),
                ]:
                    try:
                        await call()
                        late[name] = "ok"
                    except ToolError as exc:
                        late[name] = exc

    agent = Agent(script=stubborn_turn)
    async with open_test_plane(store_root, options(agent)) as plane:
        accepted = await send(plane, "stubborn", "m-1")
        task_id = task_id_of(accepted)
        await agent.wait_turns(1)
        before = await plane.get_task(ALICE, task_id)
        assert before.status.state is WORKING and plane.wake.authority == task_id
        queued = task_id_of(await send(plane, "next in line", "m-2"))

        canceled_at = trio.current_time()
        canceled = await plane.cancel(ALICE, task_id)
        assert canceled.status.state is CANCELED
        await trio.testing.wait_all_tasks_blocked()

        (turn, *_rest) = agent.of(task_id)
        assert turn.outcome == "cancelled"
        assert turn.ended == canceled_at  # interrupted promptly: no virtual time passed
        assert set(late) == {"complete", "output", "input"}
        assert all(isinstance(v, ToolError) for v in late.values()), late
        after = await plane.get_task(ALICE, task_id)
        assert after.status.state is CANCELED
        assert after.artifacts == () and after.history == before.history
        # The authority moved on with the queue; the stale toolbox stays refused.
        assert (await settle(plane, queued)).status.state is COMPLETED
        assert agent.order() == [task_id, queued]
        assert plane.wake.authority is None
        with pytest.raises(ToolError):
            await turn.tools.a2a_read_task(task_id)
        assert task_id in agent.released
        rows = await journal(plane, task_id=task_id)
        assert deliveries_of(rows, accepted.activation_id) == [1]
        assert "WAKE_FAILED" not in kinds_of(rows, accepted.activation_id)
        assert await evidence(plane, "activation.unhealthy") == []


# --- concurrent first messages ------------------------------------------------------------


async def test_concurrent_native_first_messages_resolve_one_context_id(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    agent = Agent()
    async with open_test_plane(store_root, options(agent)) as plane:
        contexts: dict[str, str | None] = {}

        async def first(n: int, scope: Scope) -> None:
            accepted = await plane.ingest(
                scope, "spool", f"event-{n}", "new-thread", [Part.from_text(f"hello {n}")]
            )
            assert accepted.task is not None and accepted.disposition == "created"
            contexts[f"{scope.principal}-{n}"] = accepted.task.context_id

        async with trio.open_nursery() as nursery:
            for n in range(16):
                nursery.start_soon(first, n, ALICE)
                nursery.start_soon(first, n, BETA)
        alpha = {c for k, c in contexts.items() if k.startswith("alpha")}
        beta = {c for k, c in contexts.items() if k.startswith("beta")}
        assert len(contexts) == 32
        assert len(alpha) == 1 and len(beta) == 1 and alpha != beta


async def test_concurrent_a2a_first_messages_with_one_unknown_context_id_resolve_one_context_id(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Sends naming the same client-chosen (unknown) contextId at once end up in one
    context, never scattered over several freshly minted ones; another principal's use
    of the same string never joins it."""
    agent = Agent()
    async with open_test_plane(store_root, options(agent)) as plane:
        contexts: dict[str, str | None] = {}

        async def first(n: int, scope: Scope) -> None:
            accepted = await send(
                plane, f"hello {n}", f"m-{n}", context_id="client-chosen-ctx", scope=scope
            )
            assert accepted.task is not None and accepted.disposition == "created"
            contexts[f"{scope.principal}-{n}"] = accepted.task.context_id

        async with trio.open_nursery() as nursery:
            for n in range(16):
                nursery.start_soon(first, n, ALICE)
                nursery.start_soon(first, n, BETA)
        alpha = {c for k, c in contexts.items() if k.startswith("alpha")}
        beta = {c for k, c in contexts.items() if k.startswith("beta")}
        assert len(contexts) == 32
        assert len(alpha) == 1, f"alpha's 16 sends landed in {len(alpha)} contexts"
        assert len(beta) == 1, f"beta's 16 sends landed in {len(beta)} contexts"
        assert alpha != beta


# --- subscribers ---------------------------------------------------------------------------


async def test_a_stalled_subscriber_is_disconnected_without_blocking_the_owner_or_a_reader(
    store_root: Path,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    updates = 40

    async def chatty_turn(agent: Agent, turn: Turn) -> None:
        if turn.task_id != chatty[0]:
            await behave(agent, turn)
            return
        for n in range(updates):
            await turn.tools.a2a_record_output(turn.task_id, "pull-request", {"revision": n})
        await turn.tools.a2a_complete_task(turn.task_id, "all revisions recorded")

    chatty: list[str] = []
    agent = Agent(script=chatty_turn)
    async with open_test_plane(store_root, options(agent)) as plane:
        await send(plane, "block:hold", "m-0")
        await agent.wait_turns(1)
        chatty.append(task_id := task_id_of(await send(plane, "chatty", "m-1")))
        stalled = await plane.subscribe(ALICE, task_id)  # never read during the turn
        reader = await plane.subscribe(ALICE, task_id)
        read: list[StreamResponse] = []

        async def read_all() -> None:
            read.extend(await drain(reader))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_all)
            agent.open("hold")
            await agent.wait_turns(2, ended=True)

        (turn,) = agent.of(task_id)
        assert turn.outcome == "returned"
        assert turn.ended == turn.started  # the owner never waited on the stalled one
        # The reader saw everything, in order, up to the terminal frame.
        assert frame_state(read[0]) == "TASK_STATE_SUBMITTED"
        revisions = [
            f.artifact_update.artifact.metadata  # type: ignore[union-attr]
            for f in read
            if f.artifact_update is not None and f.artifact_update.artifact.name == "pull-request"
        ]
        assert len(revisions) == updates
        assert terminal_frames(read) == ["TASK_STATE_COMPLETED"]
        assert frame_state(read[-1]) == "TASK_STATE_COMPLETED"
        # The stalled one kept exactly its buffer, then was cut off without a terminal.
        stale = await drain(stalled)
        assert len(stale) == SUBSCRIBER_BUFFER == 32
        assert stale == read[:SUBSCRIBER_BUFFER]
        assert terminal_frames(stale) == []
        assert len(events(caplog, "subscriber_disconnected")) == 1
        assert (await plane.get_task(ALICE, task_id)).status.state is COMPLETED


# --- owner lifecycle -----------------------------------------------------------------------


async def test_a_turn_that_ends_its_task_starts_its_owner_once(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # The turn's last tool call left the Task terminal: the wake actor needs no fresh
    # snapshot after the turn, so the retired owner is not started again (and the
    # Task not read again) just to learn what it already knows.
    agent = Agent()
    async with open_test_plane(store_root, options(agent)) as plane:
        done = task_id_of(await send(plane, "finish", "m-0"))
        await quiesce()
        assert plane.registry.started_count == 1
        assert len(plane.registry) == 0
        assert plane.wake.statistics().offered == 0  # the wake is over
        assert (await settle(plane, done)).status.state is COMPLETED


async def test_owners_retire_after_idle_and_restart_on_demand(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    agent = Agent()
    async with open_test_plane(store_root, options(agent)) as plane:
        done = task_id_of(await send(plane, "finish", "m-0"))
        await settle(plane, done)
        await quiesce()
        assert len(plane.registry) == 0  # a terminal, unwatched Task's owner goes at once

        waiting = task_id_of(await send(plane, "ask:colour?", "m-1"))
        assert (await settle(plane, waiting)).status.state is INPUT_REQUIRED
        await quiesce()
        assert len(plane.registry) == 1
        started = plane.registry.started_count
        await quiesce(OWNER_IDLE_S - 1)
        assert len(plane.registry) == 1
        await quiesce(2)
        assert len(plane.registry) == 0  # idle past OWNER_IDLE_S: retired

        # Restarted on demand; a subscriber keeps it alive past the idle period.
        frames = await plane.subscribe(ALICE, waiting)
        assert plane.registry.started_count == started + 1
        assert len(plane.registry) == 1
        await quiesce(3 * OWNER_IDLE_S)
        assert len(plane.registry) == 1
        frames.close()
        await quiesce(OWNER_IDLE_S + 1)
        assert len(plane.registry) == 0

        # A continuation restarts it from durable state; completion retires it again.
        answer = await send(plane, "blue", "m-2", task_id=waiting)
        assert answer.disposition == "continued"
        final = await settle(plane, waiting)
        assert final.status.state is COMPLETED
        assert [m.role for m in final.history] == [Role.ROLE_USER, Role.ROLE_AGENT, Role.ROLE_USER]
        await quiesce()
        assert len(plane.registry) == 0
        assert await state_of(plane, waiting) is COMPLETED
