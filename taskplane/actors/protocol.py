"""Request/reply between actors (rule "one reply channel") and the subscription stream type.

An actor request carries a function the actor applies to its own state, plus the
send end of a size-1 reply channel. The actor answers inside ``with request.reply``:
if it crashes, the reply end closes and the caller gets :class:`ActorGone` at once
instead of waiting for its deadline.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Generic, TypeVar

import attrs
import outcome
import trio

from taskplane.errors import ActorGone

S = TypeVar("S")

CrashHook = Callable[[str], None]
"""Called by an actor loop with its kind (``"store"``, ``"intake"``, ``"wake"``,
``"owner"``) once per message; restart drills pass one that raises to crash that
actor on purpose. Production passes :func:`no_crash`."""


def no_crash(actor: str) -> None:
    """The production :data:`CrashHook`: never crashes anything."""


T = TypeVar("T")


@attrs.frozen
class Request(Generic[S]):
    """Apply ``fn`` to the actor's state ``S`` and send back its outcome."""

    fn: Callable[[S], Awaitable[Any]]
    reply: trio.MemorySendChannel[outcome.Outcome[Any]]

    async def run(self, state: S) -> None:
        """Run ``fn`` and reply; any exception ``fn`` raises goes to the caller.

        Cancellation is not caught: the reply channel closes and the caller sees
        :class:`ActorGone`.
        """
        with self.reply:
            result: outcome.Outcome[Any]
            try:
                result = outcome.Value(await self.fn(state))
            # Cancelled is a BaseException: it propagates (rule "Cancelled propagates")
            except Exception as exc:
                result = outcome.Error(exc)
            try:
                self.reply.send_nowait(result)
            except (trio.BrokenResourceError, trio.WouldBlock):
                pass  # the caller gave up waiting


@contextmanager
def _closed_on_crash_impl(request: Request[Any]) -> Iterator[None]:
    try:
        yield
    except BaseException:
        request.reply.close()
        raise


def closed_on_crash(request: Request[Any]) -> AbstractContextManager[None]:
    """Close ``request``'s reply channel if the block raises (the actor crashes with
    the request in hand: its caller gets :class:`ActorGone` at once, rule "one reply channel")."""
    return _closed_on_crash_impl(request)


def make_request(
    fn: Callable[[S], Awaitable[T]],
) -> tuple[Request[S], trio.MemoryReceiveChannel[outcome.Outcome[Any]]]:
    """A request for ``fn`` and the receive end its reply arrives on."""
    reply_tx, reply_rx = trio.open_memory_channel[outcome.Outcome[Any]](1)
    return Request(fn, reply_tx), reply_rx


async def await_reply(reply_rx: trio.MemoryReceiveChannel[outcome.Outcome[Any]], who: str) -> Any:
    """The value replied on ``reply_rx`` (raises what the actor's function raised).

    Raises:
        ActorGone: the actor closed the reply channel without answering (crash/stop).
    """
    with reply_rx:
        try:
            result = await reply_rx.receive()
        except trio.EndOfChannel:
            raise ActorGone(f"{who} stopped before answering; retry the request") from None
    return result.unwrap()
