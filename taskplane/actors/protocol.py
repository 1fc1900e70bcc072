"""Request/reply between actors: typed messages, each carrying its own reply channel.

Every actor inbox takes a closed set of frozen message types (see
:mod:`taskplane.actors.owner_messages`), compared and hashed by identity (each is
one occurrence, ``attrs.frozen(eq=False)``); each message carries the send end of a
size-1 reply channel, :data:`ReplyTo`. The actor answers through :func:`answer`: if
it crashes with the message in hand, the reply end closes and the caller gets
:class:`~taskplane.errors.ActorGone` at once instead of waiting for its deadline
(design rule "Request and reply": a crashed actor never leaves a caller hanging).

Callers use :func:`ask`, which builds the message around a fresh reply channel, posts
it without waiting (a full inbox is the caller's ``Overloaded``), and awaits the
reply. Deadlines belong to callers: nothing here times out.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

import outcome
import trio

from taskplane.errors import ActorGone

T = TypeVar("T")
M = TypeVar("M", bound="Message")

ReplyTo = trio.MemorySendChannel[outcome.Outcome[T]]
"""The send end of a size-1 channel on which exactly one outcome is answered."""

CrashHook = Callable[[str], None]
"""Called by an actor loop with its kind (``"store"``, ``"intake"``, ``"wake"``,
``"owner"``) once per message; restart drills pass one that raises to crash that
actor on purpose. Production passes :func:`no_crash`."""


def no_crash(actor: str) -> None:
    """The production :data:`CrashHook`: never crashes anything."""


class Message(Protocol):
    """What every actor message has: the channel its one reply goes to."""

    @property
    def reply(self) -> ReplyTo[Any]: ...


async def ask(post: Callable[[M], None], build: Callable[[ReplyTo[T]], M], who: str) -> T:
    """Post ``build(reply)`` with ``post`` and wait for the one reply.

    Args:
        post: puts the message in the actor's inbox without waiting; raises
            ``Overloaded`` (or another refusal) when it cannot, and then nothing was sent.
        build: makes the message around the reply channel.
        who: names the actor in the :class:`ActorGone` message.
    Returns:
        the value the actor answered.
    Raises:
        whatever the actor answered as an error, or ``post`` raised;
        ActorGone: the actor stopped or crashed with the message in hand.
    Cancellation: cancelling the caller only drops the reply; the message, once
    posted, is still handled (so its effects may still happen).
    """
    reply_tx, reply_rx = trio.open_memory_channel[outcome.Outcome[T]](1)
    with reply_rx:
        try:
            post(build(reply_tx))
        except BaseException:
            reply_tx.close()
            raise
        try:
            result = await reply_rx.receive()
        except trio.EndOfChannel:
            raise ActorGone(f"{who} stopped before answering; retry the request") from None
    return result.unwrap()


async def answer(reply: ReplyTo[T], work: Awaitable[T]) -> None:
    """Await ``work`` and send its value (or the ``Exception`` it raised) on ``reply``.

    The reply channel is closed afterwards in every case. Cancellation is not caught
    (it is not an answer): the channel closes and the caller sees :class:`ActorGone`.
    """
    with reply:
        result: outcome.Outcome[T]
        try:
            result = outcome.Value(await work)
        except Exception as exc:  # Cancelled is a BaseException: it propagates
            result = outcome.Error(exc)
        try:
            reply.send_nowait(result)
        except (trio.BrokenResourceError, trio.WouldBlock):
            pass  # the caller gave up waiting


@contextmanager
def handling(message: Message) -> Iterator[None]:
    """Name ``message``'s type on any exception raised while it is handled.

    The note (``"while handling <Type>"``) reaches the supervisor's crash report, so a
    crash names the command in hand. On a crash the message's reply channel is
    closed, so its caller gets :class:`ActorGone` at once.
    """
    try:
        yield
    except BaseException as exc:
        message.reply.close()
        if not isinstance(exc, trio.Cancelled):
            exc.add_note(f"while handling {type(message).__name__}")
        raise


def refuse_waiting(inbox: trio.MemoryReceiveChannel[Any]) -> None:
    """Close the reply channel of every message left in a dead actor's inbox, then the
    inbox: each waiting caller gets :class:`ActorGone` at once."""
    while True:
        try:
            inbox.receive_nowait().reply.close()
        except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
            break
    inbox.close()
