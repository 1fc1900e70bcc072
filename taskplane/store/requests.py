"""Store requests: how a named store operation reaches a backend's store actor.

Each backend's store turns a named operation into an *op* (a blocking function of
its private connection) and hands it to its store actor with :func:`submit`; the
actor runs it in a transaction and answers on the request's reply channel
(:mod:`taskplane.mailbox`). The request shape and the caller's side of the hand-over
are the same for every backend, so they live here; the actor (batching, threads,
the driver) is the backend's own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Generic, TypeVar

import attrs
import trio

from taskplane.mailbox import ReplyTo, ask_waiting

T = TypeVar("T")


@attrs.frozen
class ReadOp(Generic[T]):
    """An op that only reads (``fn`` of the connection writes nothing): a backend
    whose store actor has several sessions need not keep the next batch waiting
    behind a batch of reads (design rule "A batch waits for the busy session");
    every other backend runs it as any op."""

    fn: Callable[[Any], T]
    reads_only: ClassVar[bool] = True

    def __call__(self, conn: Any) -> T:
        return self.fn(conn)


def reads_only(ops: Sequence[Callable[[Any], Any]]) -> bool:
    """Whether every op of a batch only reads (:class:`ReadOp`)."""
    return all(getattr(type(op), "reads_only", False) for op in ops)


@attrs.frozen
class StoreRequest:
    """One op and the size-1 channel its outcome is sent back on
    (:mod:`taskplane.mailbox`)."""

    op: Callable[[Any], Any]
    reply: ReplyTo[Any]
    after_commit: Callable[[Any], None] | None = None


async def submit(
    inbox: trio.MemorySendChannel[StoreRequest],
    op: Callable[[Any], T],
    after_commit: Callable[[T], None] | None = None,
) -> T:
    """Run ``op`` in the store actor's next transaction and return its value.

    ``after_commit(value)`` runs on the trio thread right after the COMMIT that made
    ``op`` durable, whether or not this caller is still waiting. It must not block;
    if it raises, the error is logged.

    Blocks while the inbox is full (backpressure) and for one commit.
    Raises:
        whatever ``op`` raised (a :class:`~taskplane.errors.TaskplaneError`);
        StoreUnavailable: the transaction could not commit; nothing was recorded.
        ActorGone: the store actor stopped or crashed before answering.
    Cancellation: if the caller is cancelled after sending, the op still runs and
    commits; only the answer is lost.
    """
    value: T = await ask_waiting(
        inbox.send, lambda reply: StoreRequest(op, reply, after_commit), "the task store"
    )
    return value
