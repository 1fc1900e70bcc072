"""The store actor: sole owner of the database connection, with group commit.

Each named operation of :class:`~taskplane.store.sqlite.store.SqliteStore` becomes an
*op* (a function of the ``sqlite3.Connection``, private to this backend) sent to this
actor with :func:`~taskplane.store.requests.submit`. The actor takes what waits in its
inbox (up to ``MAX_BATCH_OPS``) and runs it in one transaction in a worker thread: concurrent
acceptances share one fsync (group commit), and no caller is answered before the
COMMIT that holds its records has returned ("Durable first, then visible").

The COMMIT is shielded from cancellation: a caller that gives up (client disconnect,
deadline) cannot tear a transaction; its records are either all committed or all
absent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import ExitStack

import outcome
import trio

from taskplane.mailbox import CrashHook, no_crash, send_reply
from taskplane.store.requests import StoreRequest, submit
from taskplane.store.sqlite.database import Database

log = logging.getLogger("taskplane.store")

__all__ = ["MAX_BATCH_OPS", "STORE_INBOX_SIZE", "StoreRequest", "run_store", "submit"]

STORE_INBOX_SIZE = 256
MAX_BATCH_OPS = 128


async def run_store(
    db: Database,
    inbox: trio.MemoryReceiveChannel[StoreRequest],
    *,
    group_commit: bool = True,
    in_thread: bool = True,
    crash_hook: CrashHook = no_crash,
    on_batch: Callable[[int, float], None] | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``inbox`` until every sender has closed, batching ops into transactions.

    Args:
        db: the open database (this actor is its only user).
        inbox: a clone of the store inbox's receive end (buffered requests survive a
            restart of this actor).
        group_commit: batch what waits into one transaction (``False``: one op per
            transaction; used by the benchmark).
        in_thread: run SQLite in a worker thread (``False``: on the trio thread, for
            deterministic MockClock tests; it then blocks the event loop per batch).
        crash_hook: restart drills only: called with ``"store"`` before each batch.
        on_batch: metrics: called with (ops in the batch, seconds the transaction
            took, commit included) after each batch; must not block or raise.
    Concurrency: calls ``task_status.started()`` at once; each batch runs in a worker
    thread inside a shielded scope.
    """
    limit = MAX_BATCH_OPS if group_commit else 1
    async with inbox:
        task_status.started()
        async for first in inbox:
            batch = [first]
            while len(batch) < limit:
                try:
                    batch.append(inbox.receive_nowait())
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
            with ExitStack() as answering:
                for request in batch:  # each answered inside ``with request.reply``
                    answering.enter_context(request.reply)
                crash_hook("store")
                ops = [r.op for r in batch]
                started = time.perf_counter()
                with trio.CancelScope(shield=True):
                    if in_thread:
                        results = await trio.to_thread.run_sync(db.run_batch, ops)
                    else:
                        await trio.lowlevel.checkpoint()
                        results = db.run_batch(ops)
                if on_batch is not None:
                    on_batch(len(ops), time.perf_counter() - started)
                for request, result in zip(batch, results, strict=True):
                    if request.after_commit is not None and isinstance(result, outcome.Value):
                        try:
                            request.after_commit(result.value)
                        except Exception:
                            log.exception(
                                "after-commit hook failed", extra={"event": "store_hook_failed"}
                            )
                    send_reply(request.reply, result)  # a caller that gave up: committed anyway
