"""taskplane/mailbox.py: the one request/reply primitive (STYLE SC-4).

The store actor and the actors of ``taskplane.actors`` all ask through it: a caller
never hangs on an actor that is gone, whichever way it went.
"""

from __future__ import annotations

import attrs
import outcome
import pytest
import trio
import trio.testing

from taskplane.errors import ActorGone, Overloaded
from taskplane.mailbox import ReplyTo, answer, ask, ask_waiting, send_reply


@attrs.frozen(eq=False)
class Echo:
    value: int
    reply: ReplyTo[int]


async def _serve(inbox: trio.MemoryReceiveChannel[Echo]) -> None:
    async with inbox:
        async for message in inbox:

            async def double(message: Echo = message) -> int:
                return message.value * 2

            await answer(message.reply, double())


async def test_ask_and_ask_waiting_get_the_answer(nursery: trio.Nursery) -> None:
    tx, rx = trio.open_memory_channel[Echo](1)
    nursery.start_soon(_serve, rx)
    async with tx:
        assert await ask(tx.send_nowait, lambda reply: Echo(2, reply), "echo") == 4
        assert await ask_waiting(tx.send, lambda reply: Echo(3, reply), "echo") == 6


async def test_an_answered_error_is_raised_to_the_caller() -> None:
    tx, rx = trio.open_memory_channel[Echo](1)

    def post(message: Echo) -> None:
        tx.send_nowait(message)

    async def fail() -> int:
        raise Overloaded("busy")

    async with trio.open_nursery() as nursery:

        async def serve_once() -> None:
            await answer((await rx.receive()).reply, fail())

        nursery.start_soon(serve_once)
        with pytest.raises(Overloaded):
            await ask(post, lambda reply: Echo(1, reply), "echo")


async def test_a_refused_post_sends_nothing() -> None:
    def full(message: Echo) -> None:
        raise Overloaded("full")

    with pytest.raises(Overloaded):
        await ask(full, lambda reply: Echo(1, reply), "echo")


async def test_an_actor_that_drops_the_message_is_gone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tx, rx = trio.open_memory_channel[Echo](1)

    async def crash_with_it() -> None:
        with (await rx.receive()).reply:
            pass  # closed without an answer, as on a crash inside ``with message.reply``

    async with trio.open_nursery() as nursery:
        nursery.start_soon(crash_with_it)
        with trio.fail_after(1), pytest.raises(ActorGone, match="echo stopped before answering"):
            await ask_waiting(tx.send, lambda reply: Echo(1, reply), "echo")


async def test_a_closed_inbox_is_an_actor_not_running() -> None:
    tx, rx = trio.open_memory_channel[Echo](1)
    rx.close()
    with pytest.raises(ActorGone, match="the task store is not running"):
        await ask_waiting(tx.send, lambda reply: Echo(1, reply), "the task store")


def test_send_reply_ignores_a_caller_that_gave_up() -> None:
    reply_tx, reply_rx = trio.open_memory_channel[outcome.Outcome[int]](1)
    reply_rx.close()
    send_reply(reply_tx, outcome.Value(1))  # no error
