"""Restart drills (STYLE SUP-4): supervised actors with a crash button.

Rules: no real sleeps (``autojump_clock`` for anything timed), and after every trigger
``wait_all_tasks_blocked()`` before asserting. A mailbox actor follows SC-3 (a fresh
``inbox.clone()`` per incarnation; the supervisor side keeps the original) and SC-4
(it answers inside ``with msg.reply:``, so a crash closes the reply channel).
"""

from __future__ import annotations

import attrs
import pytest
import trio
import trio.testing

from taskplane.errors import ActorGone
from taskplane.supervision import (
    ChildSpec,
    RestartIntensityExceeded,
    RestartPolicy,
    supervise,
)

DEADLINE_S = 1000.0  # virtual seconds: a regression fails fast instead of hanging


async def settle() -> None:
    await trio.testing.wait_all_tasks_blocked()


class Flaky:
    """A child that serves until its crash button (one Event per incarnation) is pressed."""

    def __init__(self) -> None:
        self.starts = 0
        self.crash = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.starts += 1
        self.crash = trio.Event()
        task_status.started()
        await self.crash.wait()
        raise RuntimeError(f"crash button pressed (incarnation {self.starts})")


class Poison(Exception):
    """Raised by the echo actor for the message "poison"."""


@attrs.frozen
class Cmd:
    text: str
    reply: trio.MemorySendChannel[str] | None = None


class Echo:
    """A mailbox actor: records each message it handled as (incarnation, text)."""

    def __init__(self) -> None:
        self.starts = 0
        self.handled: list[tuple[int, str]] = []

    async def run(
        self,
        inbox: trio.MemoryReceiveChannel[Cmd],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        self.starts += 1
        incarnation = self.starts
        async with inbox:
            task_status.started()
            async for cmd in inbox:
                if cmd.reply is None:
                    self._handle(incarnation, cmd.text)
                    continue
                with cmd.reply:  # SC-4: a crash in here closes the caller's reply channel
                    await cmd.reply.send(self._handle(incarnation, cmd.text))

    def _handle(self, incarnation: int, text: str) -> str:
        if text == "poison":
            raise Poison(text)
        self.handled.append((incarnation, text))
        return text.upper()


def echo_spec(actor: Echo, inbox: trio.MemoryReceiveChannel[Cmd]) -> ChildSpec:
    """SC-3: every incarnation gets its own clone; ``inbox`` stays with the caller."""

    async def start(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await actor.run(inbox.clone(), task_status=task_status)

    return ChildSpec("echo", start)


async def ask(inbox: trio.MemorySendChannel[Cmd], text: str) -> str:
    """Request/reply per SC-4; the caller owns the deadline."""
    reply_tx, reply_rx = trio.open_memory_channel[str](1)
    with reply_rx:
        try:
            await inbox.send(Cmd(text, reply_tx))
            return await reply_rx.receive()
        except (trio.EndOfChannel, trio.BrokenResourceError) as exc:
            reply_tx.close()  # not delivered (BrokenResourceError): it is still ours
            raise ActorGone(f"no reply to {text!r}") from exc


async def test_restarts_under_the_limit(autojump_clock: trio.testing.MockClock) -> None:
    with trio.fail_after(DEADLINE_S):
        child, policy = Flaky(), RestartPolicy(max_restarts=3, period_s=10)
        async with trio.open_nursery() as nursery:
            await nursery.start(supervise, ChildSpec("owner", child.run), policy)
            for _ in range(3):
                child.crash.set()
                await settle()
            assert child.starts == 4  # three restarts, still supervised
            nursery.cancel_scope.cancel()


async def test_escalates_after_intensity(autojump_clock: trio.testing.MockClock) -> None:
    with trio.fail_after(DEADLINE_S):
        child, policy = Flaky(), RestartPolicy(max_restarts=2, period_s=10)
        with pytest.RaisesGroup(RestartIntensityExceeded):
            async with trio.open_nursery() as nursery:
                await nursery.start(supervise, ChildSpec("owner", child.run), policy)
                for _ in range(3):
                    child.crash.set()
                    await settle()
        assert child.starts == 3


async def test_crashes_spaced_wider_than_the_period_never_escalate(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        child, policy = Flaky(), RestartPolicy(max_restarts=1, period_s=10)
        async with trio.open_nursery() as nursery:
            await nursery.start(supervise, ChildSpec("owner", child.run), policy)
            for _ in range(10):
                child.crash.set()
                await settle()
                await trio.sleep(policy.period_s + 1)
            assert child.starts == 11
            nursery.cancel_scope.cancel()


async def test_buffered_mailbox_messages_survive_a_restart(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        actor = Echo()
        tx, rx = trio.open_memory_channel[Cmd](8)
        async with tx, trio.open_nursery() as nursery:
            with rx:  # the supervisor side keeps the original receive end
                await nursery.start(supervise, echo_spec(actor, rx), RestartPolicy(max_restarts=3))
                for text in ("a", "poison", "b", "c"):
                    tx.send_nowait(Cmd(text))
                # "a" went straight to the waiting actor; three wait in the channel's buffer
                assert tx.statistics().current_buffer_used == 3
                await settle()
                # the message in hand at the crash is not redelivered; the ones behind it are
                assert actor.handled == [(1, "a"), (2, "b"), (2, "c")]
                assert actor.starts == 2
                tx.send_nowait(Cmd("d"))  # senders never noticed the restart
                await settle()
                assert actor.handled[-1] == (2, "d")
                nursery.cancel_scope.cancel()


async def test_ask_to_a_crashing_actor_fails_before_its_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        actor = Echo()
        tx, rx = trio.open_memory_channel[Cmd](8)
        async with tx, trio.open_nursery() as nursery:
            with rx:
                await nursery.start(supervise, echo_spec(actor, rx), RestartPolicy(max_restarts=3))
                before = trio.current_time()
                with trio.fail_after(30), pytest.raises(ActorGone) as caught:
                    await ask(tx, "poison")
                assert isinstance(caught.value.__cause__, trio.EndOfChannel)
                assert trio.current_time() == before  # prompt: no virtual time passed
                with trio.fail_after(30):
                    assert await ask(tx, "hello") == "HELLO"  # the new incarnation answers
                assert actor.starts == 2
                nursery.cancel_scope.cancel()


async def test_ask_after_escalation_finds_the_mailbox_broken(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.fail_after(DEADLINE_S):
        actor = Echo()
        tx, rx = trio.open_memory_channel[Cmd](8)
        escalated = trio.Event()

        async def supervised_echo(*, task_status: trio.TaskStatus[None]) -> None:
            with rx:  # supervision ends -> the original closes -> senders see BrokenResourceError
                try:
                    await supervise(
                        echo_spec(actor, rx), RestartPolicy(max_restarts=0), task_status=task_status
                    )
                except RestartIntensityExceeded:
                    escalated.set()

        async with tx, trio.open_nursery() as nursery:
            await nursery.start(supervised_echo)
            with trio.fail_after(30), pytest.raises(ActorGone):
                await ask(tx, "poison")
            await settle()
            assert escalated.is_set()
            before = trio.current_time()
            with trio.fail_after(30), pytest.raises(ActorGone) as caught:
                await ask(tx, "hello")
            assert isinstance(caught.value.__cause__, trio.BrokenResourceError)
            assert trio.current_time() == before
