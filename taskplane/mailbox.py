"""Request and reply between actors: each message carries its own reply channel.

Every actor of taskplane (the store actor, intake, the owners, the serializers) takes
requests the same way, so a crashed actor never leaves a caller hanging:

* the message carries the send end of a size-1 reply channel, :data:`ReplyTo`;
* the caller builds the message around a fresh reply channel and posts it with
  :func:`ask` (without waiting: a full inbox is the caller's refusal, e.g.
  ``Overloaded``) or :func:`ask_waiting` (waiting for room: backpressure), then
  awaits exactly one :class:`outcome.Outcome`;
* the actor answers inside ``with message.reply:`` (:func:`answer`, or
  :func:`send_reply` for an outcome computed elsewhere). If it crashes with the
  message in hand, the reply end closes and the caller gets
  :class:`~taskplane.errors.ActorGone` at once instead of waiting for its deadline
  (:func:`handling` closes it and names the message on the crash;
  :func:`refuse_waiting` does the same for what a dead actor's inbox still holds).

Deadlines belong to callers: nothing here times out. :data:`CrashHook` is the crash
button every actor loop presses once per message (restart drills pass one that
raises). This module imports only :mod:`taskplane.errors` (a leaf).
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
``"owner"``) once per message (the store: once per batch); restart drills pass one
that raises to crash that actor on purpose. Production passes :func:`no_crash`."""


def no_crash(actor: str) -> None:
    """The production :data:`CrashHook`: never crashes anything."""


class Message(Protocol):
    """What every actor message has: the channel its one reply goes to."""

    @property
    def reply(self) -> ReplyTo[Any]: ...


async def ask(post: Callable[[M], None], build: Callable[[ReplyTo[T]], M], who: str) -> T:
    """Post ``build(reply)`` with ``post`` (never waiting) and wait for the one reply.

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
        return await _reply(reply_rx, who)


async def ask_waiting(
    send: Callable[[M], Awaitable[None]], build: Callable[[ReplyTo[T]], M], who: str
) -> T:
    """Send ``build(reply)`` with ``send``, waiting for room, and wait for the reply.

    Args:
        send: the inbox's ``send`` (blocks while the inbox is full: backpressure).
        build: makes the message around the reply channel.
        who: names the actor in the :class:`ActorGone` message.
    Returns:
        the value the actor answered.
    Raises:
        whatever the actor answered as an error;
        ActorGone: the inbox is closed (the actor is not running), or the actor
            stopped or crashed with the message in hand.
    Cancellation: while waiting for room, nothing was sent; once sent, as :func:`ask`.
    """
    reply_tx, reply_rx = trio.open_memory_channel[outcome.Outcome[T]](1)
    with reply_rx:
        try:
            await send(build(reply_tx))
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            reply_tx.close()
            raise ActorGone(f"{who} is not running") from exc
        except BaseException:
            reply_tx.close()
            raise
        return await _reply(reply_rx, who)


async def _reply(reply_rx: trio.MemoryReceiveChannel[outcome.Outcome[T]], who: str) -> T:
    try:
        result = await reply_rx.receive()
    except trio.EndOfChannel:
        raise ActorGone(f"{who} stopped before answering; retry the request") from None
    return result.unwrap()


def send_reply(reply: ReplyTo[T], result: outcome.Outcome[T]) -> None:
    """Send ``result`` on ``reply`` without waiting; a caller that gave up (the reply
    channel's receive end is closed) is ignored. Never raises for that.

    The caller closes ``reply`` (``with reply:``) once it has answered.
    """
    try:
        reply.send_nowait(result)
    except (trio.BrokenResourceError, trio.WouldBlock):
        pass  # the caller gave up waiting


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
        send_reply(reply, result)


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
