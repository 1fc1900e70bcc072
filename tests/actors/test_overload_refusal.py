"""Refusing new work under a full wake queue is cheap and keeps idempotency.

"Wake admission is bounded": with 128 wakes waiting, new work waits at most
``ADMISSION_WAIT_S`` for a slot (parked, no CPU) and is then refused (503,
``Retry-After: 1``, nothing recorded), while a duplicate of an accepted message still
gets its prior answer. Intake's claim index lets certainly new work skip the store
entirely, so refusals cannot queue store work in front of the agent's turns; beyond
``MAX_ADMISSION_WAITERS`` waiting senders new work is refused at once.
These tests count the SQL statements the store runs (through the connection factory
hook) to show which answers touched the store. Virtual time, SQLite on the trio thread.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trio
import trio.testing

from taskplane.actors.admission_limits import ADMISSION_WAIT_S, MAX_ADMISSION_WAITERS
from taskplane.actors.plane import TaskPlane
from taskplane.errors import DuplicateMessageId, Overloaded
from taskplane.store.records import Accepted
from tests.store.faults import faulty_connection
from tests.support.agent import Agent, user_text
from tests.support.overload import PingAgent, StatementLog, fill
from tests.support.plane import open_test_plane
from tests.support.virtual import (
    COMPLETED,
    events,
    journal,
    options,
    quiesce,
    send,
    settle,
    task_id_of,
)


async def refused(plane: TaskPlane, text: str, message_id: str, *, waits: bool = True) -> None:
    """``send`` is refused with 503 after the admission wait (or at once)."""
    started = trio.current_time()
    with pytest.raises(Overloaded) as caught:
        await send(plane, text, message_id)
    assert caught.value.retry_after_s == 1
    assert trio.current_time() - started == pytest.approx(ADMISSION_WAIT_S if waits else 0)


async def test_new_work_is_refused_without_a_store_round_trip(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    agent, log = Agent(), StatementLog()
    async with open_test_plane(
        store_root, options(agent, connection_factory=faulty_connection(log))
    ) as plane:
        await quiesce()
        assert plane.admission.statistics().claims_loaded
        _holder, waiting = await fill(plane, agent)
        before = await journal(plane)

        log.statements.clear()
        for n in range(5):
            await refused(plane, f"new {n}", f"m-new{n}")
        assert log.statements == []  # not one statement: the store never saw them

        # A duplicate of accepted work still gets its prior answer (from the store).
        duplicate = await send(plane, "w 5", "m-w5")
        assert duplicate.disposition == "duplicate"
        assert task_id_of(duplicate) == waiting[5]
        assert log.statements != []
        # The same messageId with another payload is still a 409, not a 503.
        with pytest.raises(DuplicateMessageId):
            await send(plane, "something else", "m-w7")
        assert await journal(plane) == before  # nothing was recorded by any of them

        # Once the agent catches up, the refused message is accepted as new work.
        agent.open("hold")
        await agent.wait_turns(1 + 128, ended=True)
        accepted = await send(plane, "new 0", "m-new0")
        assert accepted.disposition == "created"
        assert (await settle(plane, task_id_of(accepted))).status.state is COMPLETED


async def test_a_duplicate_from_before_a_restart_gets_its_prior_answer_when_full(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """The index is loaded from the store's claims at startup."""
    first = Agent()
    async with open_test_plane(store_root, options(first)) as plane:
        old = await send(plane, "old work", "m-old")
        await settle(plane, task_id_of(old))

    second, log = Agent(), StatementLog()
    async with open_test_plane(
        store_root, options(second, connection_factory=faulty_connection(log))
    ) as plane:
        await quiesce()
        assert plane.admission.statistics().claims_loaded
        await fill(plane, second)
        again: Accepted = await send(plane, "old work", "m-old")
        assert again.disposition == "duplicate"
        assert task_id_of(again) == task_id_of(old)
        assert again.task is not None and user_text(again.task) == "old work"
        log.statements.clear()
        await refused(plane, "brand new", "m-brand-new")
        assert log.statements == []
        second.open("hold")


async def test_a_direct_reply_is_answered_while_the_queue_is_full(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Work that needs no agent turn is never refused for a full queue."""
    agent = PingAgent()
    async with open_test_plane(store_root, options(agent)) as plane:
        await fill(plane, agent)
        reply = await send(plane, "ping", "m-ping")
        assert reply.reply is not None and reply.reply.parts[0].text == "pong"
        assert (await send(plane, "ping", "m-ping")).disposition == "duplicate"
        agent.open("hold")


async def test_without_an_index_the_store_decides_every_refusal(
    store_root: Path,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """If the claims cannot be read at startup, nothing is refused wrongly: every send
    under a full queue is looked up in the store, as before the index existed."""
    caplog.set_level(logging.WARNING)
    agent, log = Agent(), StatementLog(fail_claim_scan=True)
    async with open_test_plane(
        store_root, options(agent, connection_factory=faulty_connection(log))
    ) as plane:
        await quiesce()
        assert not plane.admission.statistics().claims_loaded
        assert len(events(caplog, "claim_index_unavailable")) == 1
        _holder, waiting = await fill(plane, agent)
        duplicate = await send(plane, "w 3", "m-w3")
        assert task_id_of(duplicate) == waiting[3]
        log.statements.clear()
        await refused(plane, "new", "m-new")
        assert any("CLAIM" in sql for sql in log.statements)  # it asked the store
        agent.open("hold")


async def test_new_work_waiting_for_a_slot_is_accepted_when_the_agent_frees_one(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    agent = Agent()
    async with open_test_plane(store_root, options(agent)) as plane:
        await fill(plane, agent)
        got: list[Accepted] = []

        async def late_send() -> None:
            got.append(await send(plane, "late", "m-late"))

        async with trio.open_nursery() as nursery:
            started = trio.current_time()
            nursery.start_soon(late_send)
            await trio.sleep(ADMISSION_WAIT_S / 2)
            assert got == []  # still waiting: not refused, nothing recorded
            agent.open("hold")  # the held turn ends: a slot frees
        (accepted,) = got
        assert accepted.disposition == "created"
        assert trio.current_time() - started < ADMISSION_WAIT_S
        assert (await settle(plane, task_id_of(accepted))).status.state is COMPLETED


async def test_beyond_the_waiting_senders_new_work_is_refused_at_once(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    agent, log = Agent(), StatementLog()
    factory = faulty_connection(log)
    async with open_test_plane(store_root, options(agent, connection_factory=factory)) as plane:
        await quiesce()
        await fill(plane, agent)
        outcomes: list[str] = []

        async def waiter(n: int) -> None:
            try:
                await send(plane, f"wait {n}", f"m-wait{n}")
            except Overloaded:
                outcomes.append("503")

        async with trio.open_nursery() as nursery:
            for n in range(MAX_ADMISSION_WAITERS):
                nursery.start_soon(waiter, n)
            await trio.testing.wait_all_tasks_blocked()
            log.statements.clear()
            await refused(plane, "one too many", "m-extra", waits=False)
            assert log.statements == []
        assert outcomes == ["503"] * MAX_ADMISSION_WAITERS  # each after its wait
        agent.open("hold")
