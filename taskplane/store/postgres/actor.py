"""The PostgreSQL store actor: one session commits the batches of ops, a second one
takes over only while the first is held up.

Each named operation of :class:`~taskplane.store.postgres.store.PgStore` becomes an
*op* (a blocking function of a psycopg connection, private to this backend) handed
over with :func:`~taskplane.store.requests.submit`. One dispatcher takes a session,
then everything waiting in the inbox (up to :data:`MAX_BATCH_OPS`), and runs that
batch as one transaction on that session in a worker thread, while it goes on
gathering the next batch. No caller is answered before the COMMIT holding its
records has returned ("Durable first, then visible").

Which session (design rule "A batch waits for the busy session"): the first session
(the primary) takes every batch, so what arrives while it commits waits and shares
its next COMMIT (group commit at its fullest: fewer, larger transactions, which is
what the database's CPU pays for). Another session takes a batch only once the
primary has held its batch for :data:`OVERFLOW_AFTER_S` (while that session is free,
a slow op, such as a compaction or a slow commit, stalls the node's other work for
no longer than that), or at once while the primary runs a batch that only reads (a
page of a large list gains nothing from company). Measured on two nodes sharing one
database: about a fifth more Tasks per second than letting every free session take
the next batch at once (``bench/README.md``).

After a batch commits, what it changed is handed to the node's ringer
(:mod:`taskplane.store.postgres.ringer`), which rings the doorbell
(:mod:`taskplane.store.postgres.doorbell`) for the batches of a few milliseconds at
once, on a session of its own: never inside a batch's transaction, where a NOTIFY
would serialize every commit of the database. Callers are answered at once (the
ring is a hint, so the order of ring and answer is immaterial to the nodes that hear
it: each reads what it shows from the committed rows).

Each COMMIT is shielded from cancellation: a caller that gives up cannot tear a
transaction. Batches on different sessions run concurrently, so two ops of one
caller are ordered only if the second is submitted after the first was answered
(as every caller does: each awaits its answer).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack

import outcome
import trio

from taskplane.mailbox import CrashHook, no_crash, send_reply
from taskplane.store.postgres import doorbell
from taskplane.store.postgres.database import PgConnection
from taskplane.store.postgres.ringer import Ringer
from taskplane.store.requests import StoreRequest, reads_only

log = logging.getLogger("taskplane.store")

MAX_BATCH_OPS = 64
"""The most ops one transaction holds: one SAVEPOINT each, and PostgreSQL keeps 64
subtransactions per session in shared memory before it overflows to a slower path."""

OVERFLOW_AFTER_S = 0.05
"""Seconds the primary session may hold one batch before another session takes the
next batch (a batch usually commits in a few milliseconds)."""


class SessionPool:
    """Which session takes the next batch (design rule "A batch waits for the busy
    session"): the primary (``sessions[0]``) whenever it is free; another free session
    only once the primary has held its current batch for ``overflow_after_s``
    seconds (0: any free session at once).

    Used on the trio thread only, by the store actor: :meth:`take` a session, say
    when its batch :meth:`started`, :meth:`give_back` it when the batch is over.
    """

    def __init__(self, sessions: Sequence[PgConnection], overflow_after_s: float) -> None:
        if not sessions:
            raise ValueError("a store needs at least one session")
        self._primary = sessions[0]
        self._idle: list[PgConnection] = list(sessions)
        self._overflow_after_s = overflow_after_s
        self._primary_since = float("-inf")
        """Trio time the primary began its current batch."""
        self._changed = trio.Event()

    async def take(self) -> PgConnection:
        """The session for the next batch; waits while none may take it."""
        while True:
            if self._primary in self._idle:
                self._idle.remove(self._primary)
                return self._primary
            overflow_at = self._primary_since + self._overflow_after_s
            if self._idle and trio.current_time() >= overflow_at:
                return self._idle.pop()
            changed = self._changed
            with trio.move_on_at(overflow_at if self._idle else math.inf):
                await changed.wait()

    def started(self, session: PgConnection, *, reads_only: bool = False) -> None:
        """``session`` (taken) begins its batch now; a batch that ``reads_only``
        (nothing to commit for others to share) lets another session take the next
        batch at once."""
        if session is self._primary:
            self._primary_since = float("-inf") if reads_only else trio.current_time()

    def give_back(self, session: PgConnection) -> None:
        """``session``'s batch is over: it may take another."""
        self._idle.append(session)
        self._changed.set()
        self._changed = trio.Event()


class BatchCounters:
    """Counters of the batches run (updated on the trio thread only)."""

    def __init__(self) -> None:
        self.transactions = 0
        self.operations = 0
        self.largest_batch = 0

    def count(self, ops: int) -> None:
        """Record one transaction of ``ops`` operations."""
        self.transactions += 1
        self.operations += ops
        self.largest_batch = max(self.largest_batch, ops)


async def run_store(
    sessions: Sequence[PgConnection],
    inbox: trio.MemoryReceiveChannel[StoreRequest],
    counters: BatchCounters,
    *,
    group_commit: bool = True,
    overflow_after_s: float = OVERFLOW_AFTER_S,
    crash_hook: CrashHook = no_crash,
    on_batch: Callable[[int, float], None] | None = None,
    node_id: str | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``inbox`` until every sender has closed, each batch on the session
    :class:`SessionPool` gives.

    Args:
        sessions: the open sessions (this actor is their only user).
        inbox: a clone of the store inbox's receive end (buffered requests survive a
            restart of this actor).
        counters: updated after each batch (read by ``statistics()``).
        group_commit: batch what waits (``False``: one op per transaction, on any
            free session at once; used by the benchmarks).
        overflow_after_s: seconds the primary session may hold a batch before another
            session takes the next one (:class:`SessionPool`).
        crash_hook: restart drills only: called with ``"store"`` before each batch
            is handed to its session.
        on_batch: metrics: called with (ops in the batch, seconds the transaction
            took, commit included) after each batch; must not block or raise.
        node_id: the node whose doorbell rings these are (each payload names it, so
            the node can tell its own rings; ``None``: unnamed).
    Concurrency: calls ``task_status.started()`` at once; each batch runs in a worker
    thread inside a shielded scope, at most one per session.
    """
    limit = MAX_BATCH_OPS if group_commit else 1
    pool = SessionPool(sessions, overflow_after_s if group_commit else 0.0)
    ring_session = PgConnection(sessions[0].url)
    ringer = Ringer(ring_session, node_id)
    try:
        async with trio.open_nursery() as ringing:
            ringing.start_soon(ringer.run)
            await _dispatch(inbox, pool, limit, counters, crash_hook, on_batch, ringer, task_status)
            ringing.cancel_scope.cancel()  # and waits for a ring in flight to end
        await ringer.flush()  # the last batches' rings, on the session alone
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(ring_session.close)


async def _dispatch(
    inbox: trio.MemoryReceiveChannel[StoreRequest],
    pool: SessionPool,
    limit: int,
    counters: BatchCounters,
    crash_hook: CrashHook,
    on_batch: Callable[[int, float], None] | None,
    ringer: Ringer,
    task_status: trio.TaskStatus[None],
) -> None:
    async with inbox, trio.open_nursery() as nursery:
        task_status.started()
        while True:
            session = await pool.take()
            try:
                first = await inbox.receive()
            except trio.EndOfChannel:
                pool.give_back(session)
                break
            batch = [first]
            while len(batch) < limit:
                try:
                    batch.append(inbox.receive_nowait())
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
            pool.started(session, reads_only=reads_only([r.op for r in batch]))
            try:
                crash_hook("store")
            except BaseException:
                pool.give_back(session)
                for request in batch:
                    request.reply.close()  # their callers get ActorGone at once
                raise
            counters.count(len(batch))
            nursery.start_soon(_serve, session, batch, pool, on_batch, ringer)


async def _serve(
    session: PgConnection,
    batch: list[StoreRequest],
    pool: SessionPool,
    on_batch: Callable[[int, float], None] | None,
    ringer: Ringer,
) -> None:
    """Run ``batch`` on ``session``, hand what it changed to ``ringer``, answer each
    caller, and give the session back."""
    try:
        with ExitStack() as answering:
            for request in batch:  # each answered inside ``with request.reply``
                answering.enter_context(request.reply)
            ops = [r.op for r in batch]
            started = time.perf_counter()
            with trio.CancelScope(shield=True):
                results = await trio.to_thread.run_sync(session.run_batch, ops)
            if on_batch is not None:
                on_batch(len(ops), time.perf_counter() - started)
            ringer.add(
                r
                for res in results
                if isinstance(res, outcome.Value)
                for r in doorbell.rings_of(res.value)
            )
            for request, result in zip(batch, results, strict=True):
                if request.after_commit is not None and isinstance(result, outcome.Value):
                    try:
                        request.after_commit(result.value)
                    except Exception:
                        log.exception(
                            "after-commit hook failed", extra={"event": "store_hook_failed"}
                        )
                send_reply(request.reply, result)  # a caller that gave up: committed anyway
    finally:
        pool.give_back(session)
