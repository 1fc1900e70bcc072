"""Which session takes the PostgreSQL store actor's next batch
(``taskplane.store.postgres.actor.SessionPool``, design rule "A batch waits for the
busy session"), on trio's mock clock: the primary whenever it is free, another
session only once the primary has held its batch for the overflow delay, or at once
after a batch that only reads; and which store operations only read."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial

import outcome
import pytest
import trio
import trio.testing

from taskplane.mailbox import send_reply
from taskplane.scope import Scope
from taskplane.store.postgres.actor import OVERFLOW_AFTER_S, BatchCounters, SessionPool
from taskplane.store.postgres.database import PgConnection
from taskplane.store.postgres.store import PgStore
from taskplane.store.records import TaskQuery
from taskplane.store.requests import ReadOp, StoreRequest, reads_only
from tests.store.contract import activation


def sessions(count: int) -> list[PgConnection]:
    """Sessions that are never opened (a pool only hands them out)."""
    return [PgConnection(f"postgresql:///unused{i}") for i in range(count)]


async def taken_once_given_back(
    pool: SessionPool, meanwhile: Callable[[], Awaitable[object]], back: PgConnection
) -> PgConnection:
    """The session a :meth:`SessionPool.take` begun now returns, asserting it returns
    nothing while ``meanwhile()`` runs; ``back`` is given back after that."""
    got: list[PgConnection] = []

    async def next_batch() -> None:
        got.append(await pool.take())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(next_batch)
        await meanwhile()
        assert got == [], "a session was taken before one was given back"
        pool.give_back(back)
    return got[0]


async def test_the_primary_takes_every_batch_while_it_is_free() -> None:
    primary, second = sessions(2)
    pool = SessionPool([primary, second], OVERFLOW_AFTER_S)
    for _ in range(3):
        taken = await pool.take()
        pool.started(taken)
        assert taken is primary
        pool.give_back(taken)


async def test_the_next_batch_waits_for_the_busy_primary(
    autojump_clock: trio.testing.MockClock,
) -> None:
    primary, second = sessions(2)
    pool = SessionPool([primary, second], OVERFLOW_AFTER_S)
    pool.started(await pool.take())
    # The primary commits within the delay; the free second session never takes it.
    within = partial(trio.sleep, OVERFLOW_AFTER_S / 2)
    assert await taken_once_given_back(pool, within, primary) is primary
    assert trio.current_time() == pytest.approx(OVERFLOW_AFTER_S / 2)


async def test_another_session_takes_over_once_the_primary_is_held_too_long(
    autojump_clock: trio.testing.MockClock,
) -> None:
    primary, second = sessions(2)
    pool = SessionPool([primary, second], OVERFLOW_AFTER_S)
    pool.started(await pool.take())  # a slow batch: never given back here
    assert await pool.take() is second
    assert trio.current_time() == pytest.approx(OVERFLOW_AFTER_S)


async def test_a_primary_that_began_its_batch_late_gets_the_whole_delay(
    autojump_clock: trio.testing.MockClock,
) -> None:
    primary, second = sessions(2)
    pool = SessionPool([primary, second], OVERFLOW_AFTER_S)
    taken = await pool.take()  # taken at 0, but its batch begins only at 1 s
    await trio.sleep(1.0)
    pool.started(taken)
    assert await pool.take() is second
    assert trio.current_time() == pytest.approx(1.0 + OVERFLOW_AFTER_S)


async def test_with_every_session_busy_the_first_one_back_takes_the_batch(
    autojump_clock: trio.testing.MockClock,
) -> None:
    primary, second = sessions(2)
    pool = SessionPool([primary, second], OVERFLOW_AFTER_S)
    pool.started(await pool.take())
    overflow = await pool.take()
    pool.started(overflow)
    # Past the delay: the first session given back takes it, whichever it is.
    taken = await taken_once_given_back(pool, trio.testing.wait_all_tasks_blocked, overflow)
    assert taken is second


async def test_a_single_session_is_always_waited_for(
    autojump_clock: trio.testing.MockClock,
) -> None:
    (only,) = sessions(1)
    pool = SessionPool([only], OVERFLOW_AFTER_S)
    pool.started(await pool.take())
    long_after = partial(trio.sleep, 10 * OVERFLOW_AFTER_S)
    assert await taken_once_given_back(pool, long_after, only) is only


async def test_without_a_delay_any_free_session_takes_the_batch_at_once() -> None:
    primary, second = sessions(2)
    pool = SessionPool([primary, second], 0.0)  # group commit off: one op per batch
    pool.started(await pool.take())
    assert await pool.take() is second


def test_a_pool_needs_a_session() -> None:
    with pytest.raises(ValueError):
        SessionPool([], OVERFLOW_AFTER_S)


async def test_after_a_batch_that_only_reads_another_session_takes_the_next_at_once() -> None:
    primary, second = sessions(2)
    pool = SessionPool([primary, second], OVERFLOW_AFTER_S)
    pool.started(await pool.take(), reads_only=True)  # e.g. a page of a large list
    assert await pool.take() is second


def test_a_batch_reads_only_when_every_op_of_it_does() -> None:
    def read(conn: object) -> int:
        return 1

    assert reads_only([ReadOp(read), ReadOp(read)])
    assert not reads_only([ReadOp(read), read])
    assert ReadOp(read)(None) == 1


@pytest.mark.parametrize(
    ("call", "reads"),
    [
        (lambda s: s.find_task("t-1"), True),
        (lambda s: s.load_task(Scope("", "alice"), "t-1"), True),
        (lambda s: s.list_tasks(TaskQuery(Scope("", "alice"))), True),
        (lambda s: s.journal(task_id="t-1"), True),
        (lambda s: s.evidence(task_id="t-1"), True),
        (lambda s: s.load_delivery("d-1"), True),
        (lambda s: s.counts(0), True),
        (lambda s: s.wake_state("a-1", "t-1"), True),
        (lambda s: s.pending_activations(), True),
        (lambda s: s.find_duplicate(activation("m-1")), False),  # may forget a claim
        (lambda s: s.append((), 0), False),
        (lambda s: s.compact(0), False),
    ],
    ids=[
        "find_task",
        "load_task",
        "list_tasks",
        "journal",
        "evidence",
        "load_delivery",
        "counts",
        "wake_state",
        "pending_activations",
        "find_duplicate",
        "append",
        "compact",
    ],
)
async def test_the_store_marks_the_ops_that_only_read(
    call: Callable[[PgStore], Awaitable[object]], reads: bool
) -> None:
    tx, rx = trio.open_memory_channel[StoreRequest](1)
    store = PgStore(tx, BatchCounters())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(call, store)
        request = await rx.receive()
        send_reply(request.reply, outcome.Value(None))
    assert reads_only([request.op]) is reads
