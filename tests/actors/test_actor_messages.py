"""Typed actor messages, actor statistics, and cancellation of a canceling caller.

Issue "Architecture": each actor's inbox takes a closed set of frozen messages; a
crash report names the message in hand; actors expose ``statistics()`` records; and
cancelling a Task stops its running turn at once even when the canceling caller hangs
up before owner(T) answers. Runs in virtual time with SQLite on the trio thread.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

from taskplane.actors.owner_messages import Cancel, GetSnapshot, OwnerMessage
from taskplane.errors import ActorGone
from taskplane.mailbox import ReplyTo, ask, handling
from tests.support.agent import Agent
from tests.support.crash import CrashButton
from tests.support.plane import open_test_plane
from tests.support.virtual import (
    ALICE,
    CANCELED,
    COMPLETED,
    INPUT_REQUIRED,
    events,
    options,
    quiesce,
    send,
    settle,
    state_of,
    task_id_of,
)


async def test_cancel_stops_the_turn_even_when_the_canceling_caller_hangs_up(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    agent = Agent()
    async with open_test_plane(store_root, options(agent)) as plane:
        task_id = task_id_of(await send(plane, "block:never", "m-1"))
        await agent.wait_turns(1)
        with trio.CancelScope() as caller:
            caller.cancel()  # the caller is gone before owner(T) can answer
            await plane.cancel(ALICE, task_id)
        assert caller.cancelled_caught
        await quiesce()
        (turn,) = agent.of(task_id)
        assert turn.outcome == "cancelled"  # stopped at once, no virtual time passed
        assert turn.ended == turn.started
        assert await state_of(plane, task_id) is CANCELED
        assert plane.wake.statistics().running_turns == 0


async def test_a_cancel_committed_between_grant_and_turn_start_still_stops_the_turn(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    agent = Agent()
    async with open_test_plane(store_root, options(agent)) as plane:
        holder = task_id_of(await send(plane, "block:first", "m-1"))
        await agent.wait_turns(1)
        queued = task_id_of(await send(plane, "block:second", "m-2"))
        agent.open("first")
        await agent.wait_turns(2)
        await plane.cancel(ALICE, queued)
        await quiesce()
        assert [t.outcome for t in agent.of(queued)] == ["cancelled"]
        assert (await settle(plane, holder)).status.state is COMPLETED


async def test_owner_crash_report_names_the_message_in_hand(
    store_root: Path, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    button, agent = CrashButton(), Agent()
    async with open_test_plane(store_root, options(agent, crash_hook=button)) as plane:
        task_id = task_id_of(await send(plane, "ask:colour?", "m-1"))
        assert (await settle(plane, task_id)).status.state is INPUT_REQUIRED
        await quiesce()  # the turn's own last request to owner(T) is answered too
        button.arm("owner")
        with pytest.raises(ActorGone):
            await plane.owners.cancel(task_id, ALICE)
        await quiesce()  # the caller hears ActorGone before the supervisor logs the crash
        (crash,) = [r for r in events(caplog, "actor_crashed") if r.actor.startswith("owner:")]  # type: ignore[attr-defined]
        assert crash.exc_info is not None
        assert "while handling Cancel" in (crash.exc_info[1].__notes__ or [])  # type: ignore[union-attr]
        # The owner restarted from durable state: the Task is unchanged and cancelable.
        assert (await plane.owners.cancel(task_id, ALICE)).status.state is CANCELED


def test_handling_closes_the_reply_and_notes_the_message_type() -> None:
    reply_tx, reply_rx = trio.open_memory_channel[object](1)
    message: OwnerMessage = GetSnapshot(None, reply_tx)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError) as caught, handling(message):
        raise RuntimeError("boom")
    assert caught.value.__notes__ == ["while handling GetSnapshot"]
    with pytest.raises(trio.EndOfChannel):
        reply_rx.receive_nowait()


def test_messages_are_frozen_and_compared_by_identity() -> None:
    reply_tx, _reply_rx = trio.open_memory_channel[object](1)
    one = Cancel(ALICE, 1, reply_tx)  # type: ignore[arg-type]
    same_fields = Cancel(ALICE, 1, reply_tx)  # type: ignore[arg-type]
    assert one != same_fields and len({one, same_fields}) == 2
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        one.now_ms = 2  # type: ignore[misc]


async def test_statistics_report_queues_turns_owners_and_subscribers(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    agent = Agent()
    async with open_test_plane(store_root, options(agent)) as plane:
        idle = plane.wake.statistics()
        assert (idle.waiting, idle.running_turns, idle.turns_started) == (0, 0, 0)
        running = task_id_of(await send(plane, "block:gate", "m-1"))
        await agent.wait_turns(1)
        waiting = [task_id_of(await send(plane, f"work {n}", f"m-w{n}")) for n in range(3)]
        frames = await plane.subscribe(ALICE, running)
        wake = plane.wake.statistics()
        assert wake.authority == running and wake.running_turns == 1
        assert wake.waiting == 3 and wake.offered  # all three wait behind the running one
        assert wake.turns_started == 1
        owners = plane.registry.statistics()
        assert owners.subscribers == 1 and owners.owners >= 1 and owners.restarts == 0
        intake = plane.intake.statistics()
        assert (intake.queued, intake.in_flight, intake.refused) == (0, 0, 0)
        agent.open("gate")
        for task_id in (running, *waiting):
            assert (await settle(plane, task_id)).status.state is COMPLETED
        frames.close()
        await quiesce()  # the last turn's wrap-up (revoke, release) after its commit
        done = plane.wake.statistics()
        assert done.turns_started == 4 and done.running_turns == 0 and done.turn_failures == 0


async def test_a_burst_past_one_owners_inbox_is_refused_overloaded_and_the_rest_answered(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    from taskplane.actors.registry import OWNER_INBOX_SIZE
    from taskplane.errors import Overloaded

    agent = Agent()
    async with open_test_plane(store_root, options(agent)) as plane:
        task_id = task_id_of(await send(plane, "ask:colour?", "m-1"))
        assert (await settle(plane, task_id)).status.state is INPUT_REQUIRED
        await quiesce()
        replies = []
        # No checkpoint in between: the owner, blocked on its inbox, takes the first
        # at once and reads no other meanwhile; OWNER_INBOX_SIZE more are buffered.
        for _ in range(OWNER_INBOX_SIZE + 1):
            tx, rx = trio.open_memory_channel[object](1)
            plane.registry.post(task_id, GetSnapshot(None, tx))  # type: ignore[arg-type]
            replies.append(rx)
        tx, _rx = trio.open_memory_channel[object](1)
        with pytest.raises(Overloaded, match="too many requests in flight"):
            plane.registry.post(task_id, GetSnapshot(None, tx))  # type: ignore[arg-type]
        for rx in replies:  # every accepted request is still answered
            with trio.fail_after(1):
                assert (await rx.receive()).unwrap().task.id == task_id  # type: ignore[attr-defined]


@attrs.frozen(eq=False)
class _NotAnOwnerMessage:
    """A message type outside the closed ``OwnerMessage`` union (mypy refuses it)."""

    reply: ReplyTo[object]


async def test_a_message_type_the_owner_does_not_handle_fails_loudly_instead_of_hanging(
    store_root: Path, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    agent = Agent()
    async with open_test_plane(store_root, options(agent)) as plane:
        task_id = task_id_of(await send(plane, "hello", "m-1"))
        assert (await settle(plane, task_id)).status.state is COMPLETED

        def post(message: _NotAnOwnerMessage) -> None:
            plane.registry.post(task_id, message)  # type: ignore[arg-type]

        with trio.fail_after(1), pytest.raises(ActorGone):
            await ask(post, _NotAnOwnerMessage, "the owner")
        await quiesce()
        (crash,) = [r for r in events(caplog, "actor_crashed") if r.actor.startswith("owner:")]  # type: ignore[attr-defined]
        assert crash.exc_info is not None
        assert isinstance(crash.exc_info[1], AssertionError)  # assert_never
        assert "while handling _NotAnOwnerMessage" in (crash.exc_info[1].__notes__ or [])
        # The owner restarted and serves the closed set as before.
        assert (await plane.get_task(ALICE, task_id)).status.state is COMPLETED
