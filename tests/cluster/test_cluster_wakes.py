"""The cluster wake actor on a real PostgreSQL (``taskplane.cluster.wake``).

A plane on PostgreSQL runs its turns under wake leases. These tests let the
database's clock run out a lease by writing ``lease_until`` (the database decides
expiry, never the node), and move the node's own clock by hand (a ``MockClock``
that also runs at real speed, so nothing waits on it unless a test jumps it): a lost
lease stops the turn and the wake is reclaimed with epoch + 1, each delivery counted
until the cap fails the Task; a node whose renewals fail stops its own turn before
the lease can move; a tool call under a lease another node took records nothing.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio
import trio.testing

from taskplane.actors.admission_limits import ADMISSION_WAIT_S, WAKE_QUEUE_SIZE
from taskplane.actors.plane import TaskPlane
from taskplane.actors.wake_queue import Wake
from taskplane.actors.wake_turns import MAX_WAKE_DELIVERIES
from taskplane.app import PlaneOptions, open_plane
from taskplane.cluster.admission import SharedBound
from taskplane.cluster.identity import NodeIdentity
from taskplane.cluster.wake import ClusterWakeActor
from taskplane.errors import Fenced, Overloaded, StoreUnavailable
from taskplane.http.errors import wire_identity
from taskplane.model.enums import TaskState
from taskplane.store.postgres import wakes
from taskplane.store.postgres.wake_rows import PgWakeRows
from taskplane.store.records import Fence, TurnClaim
from taskplane.store.wake_rows import QueueFigures
from tests.store.backends import open_pg_store
from tests.store.contract import LOCATOR, NOW, activation
from tests.support.agent import Agent, Turn
from tests.support.pg import Cluster
from tests.support.plane import PUBLIC_URL
from tests.support.virtual import deliveries_of, events, journal, outputs, send, settle

TTL_S = 15.0
FAILED = TaskState.TASK_STATE_FAILED
WORKING = TaskState.TASK_STATE_WORKING
COMPLETED = TaskState.TASK_STATE_COMPLETED


@pytest.fixture
def clock() -> trio.testing.MockClock:
    """The node's clock: real speed, moved further by hand (``jump``)."""
    return trio.testing.MockClock(rate=1.0)


@pytest.fixture
def url(pg_cluster: Cluster) -> str:
    return pg_cluster.fresh_store_url()


@pytest.fixture
def conn(url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(url, autocommit=True) as c:
        yield c


@asynccontextmanager
async def node_plane(
    root: Path, url: str, agent: Agent, node_id: str = "node-a"
) -> AsyncIterator[TaskPlane]:
    options = PlaneOptions(runtime=agent)
    node = NodeIdentity(node_id, TTL_S)
    async with open_plane(
        root, public_url=PUBLIC_URL, outputs=outputs(), options=options, store_url=url, node=node
    ) as plane:
        assert isinstance(plane.wake, ClusterWakeActor)
        yield plane


def lease(conn: psycopg.Connection[Any], activation_id: str) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT state, node_id, epoch, lease_until > now() FROM wakes WHERE activation_id = %s",
        (activation_id,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def expire(conn: psycopg.Connection[Any], activation_id: str) -> None:
    conn.execute(
        "UPDATE wakes SET lease_until = now() - interval '1 second' WHERE activation_id = %s",
        (activation_id,),
    )


async def test_a_lost_lease_is_reclaimed_with_epoch_plus_one_until_the_cap_fails_the_task(
    tmp_path: Path, url: str, conn: psycopg.Connection[Any], clock: trio.testing.MockClock
) -> None:
    agent = Agent()
    async with node_plane(tmp_path, url, agent) as plane:
        accepted = await send(plane, "block:never", "m-1")
        assert accepted.task is not None
        task_id, activation_id = accepted.task.id, accepted.activation_id
        for delivery in range(1, MAX_WAKE_DELIVERIES + 1):
            with trio.fail_after(30):
                await agent.wait_turns(delivery)
            assert lease(conn, activation_id) == ("running", "node-a", delivery, True)
            expire(conn, activation_id)  # the database's clock ran out the lease
            clock.jump(TTL_S / 3)  # the next renewal finds it gone: the turn stops
        task = await settle(plane, task_id)
        rows = await journal(plane, task_id=task_id)
        stats = plane.wake.statistics()
    assert task.status.state == FAILED
    assert deliveries_of(rows, activation_id) == list(range(1, MAX_WAKE_DELIVERIES + 1))
    assert [t.outcome for t in agent.turns] == ["cancelled"] * MAX_WAKE_DELIVERIES
    assert agent.violations == []
    # The sixth claim (epoch 6) found the cap reached and gave up.
    assert lease(conn, activation_id)[2] == MAX_WAKE_DELIVERIES + 1
    assert stats.abandoned == 1


async def test_a_node_whose_renewals_fail_stops_its_turn_before_the_lease_can_move(
    tmp_path: Path,
    url: str,
    conn: psycopg.Connection[Any],
    clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    agent = Agent()
    failing = trio.Event()
    renew = PgWakeRows.renew

    async def renew_unless_cut_off(self: PgWakeRows, fences: Any) -> set[str]:
        if failing.is_set():
            raise StoreUnavailable("the database is out of reach")
        return await renew(self, fences)

    monkeypatch.setattr(PgWakeRows, "renew", renew_unless_cut_off)
    async with node_plane(tmp_path, url, agent) as plane:
        accepted = await send(plane, "block:never", "m-1")
        assert accepted.task is not None
        with trio.fail_after(30):
            await agent.wait_turns(1)
        before = await journal(plane)
        failing.set()
        clock.jump(TTL_S * 0.5)  # one renewal failed: the turn goes on
        await trio.testing.wait_all_tasks_blocked()
        assert agent.turns[0].outcome == "running"
        clock.jump(TTL_S * 0.35)  # past ttl - margin since the lease was last set
        with trio.fail_after(30):
            await agent.wait_turns(1, ended=True)
        # The lease is still this node's and current on the database: the node gave
        # its turn up first, and recorded nothing doing so.
        assert lease(conn, accepted.activation_id) == ("running", "node-a", 1, True)
        assert await journal(plane) == before
        assert isinstance(plane.wake, ClusterWakeActor)
        assert plane.wake.lost_leases == 1
        assert plane.wake.counters.turns_self_fenced == 1  # for /metrics
        assert plane.wake.counters.fenced_writes == 0
        assert (await plane.store.find_task(accepted.task.id)).task.status.state == WORKING  # type: ignore[union-attr]
    assert agent.turns[0].outcome == "cancelled"
    assert len(events(caplog, "a2a_wake_self_fenced")) == 1


async def refusal(plane: TaskPlane, message_id: str, outcome: list[BaseException]) -> None:
    try:
        await send(plane, "hello", message_id)
    except Overloaded as exc:
        outcome.append(exc)


def journal_rows(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return conn.execute("SELECT seq, kind, activation_id FROM journal ORDER BY seq").fetchall()


async def test_a_tool_call_under_a_lease_another_node_took_records_nothing(
    tmp_path: Path, url: str, conn: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    agent = Agent()
    async with node_plane(tmp_path, url, agent) as plane:
        accepted = await send(plane, "block:go", "m-1")
        assert accepted.task is not None
        with trio.fail_after(30):
            await agent.wait_turns(1)
        before = journal_rows(conn)
        expire(conn, accepted.activation_id)
        with conn.transaction():
            (taken,) = wakes.claim(conn, "node-b", TTL_S, 1)
        assert taken.fence == Fence(accepted.activation_id, 2, "node-b")
        agent.open("go")  # the turn completes its Task: a write under epoch 1
        with trio.fail_after(30):
            await agent.wait_turns(1, ended=True)
        assert isinstance(plane.wake, ClusterWakeActor)
        with trio.fail_after(30):
            while plane.wake.lost_leases < 1:
                await trio.testing.wait_all_tasks_blocked()
        assert plane.wake.counters.fenced_writes == 1  # for /metrics
        assert plane.wake.counters.turn_leases_lost == 1
        assert plane.wake.counters.wakes_reclaimed == 0  # node-b's claim, not this one's
    # A lost lease is not a failed turn: no retry, no "turn failed" warning.
    events = {getattr(r, "event", None) for r in caplog.records}
    assert "a2a_wake_lease_lost" in events and "a2a_wake_failed" not in events
    # The plane is gone: whatever it still tried under epoch 1 was refused.
    assert isinstance(agent.turns[0].error, Fenced)
    assert len(agent.turns) == 1
    assert journal_rows(conn) == before
    row = conn.execute("SELECT state FROM tasks WHERE task_id = %s", (accepted.task.id,)).fetchone()
    assert row == (WORKING.name,)
    assert lease(conn, accepted.activation_id) == ("running", "node-b", 2, True)


async def test_a_send_with_every_slot_taken_is_refused_with_503_and_records_nothing(
    tmp_path: Path, url: str, conn: psycopg.Connection[Any], clock: trio.testing.MockClock
) -> None:
    agent = Agent()
    async with node_plane(tmp_path, url, agent) as plane:
        await send(plane, "block:never", "m-running")  # holds the one turn slot
        with trio.fail_after(30):
            await agent.wait_turns(1)
        for n in range(WAKE_QUEUE_SIZE):
            await send(plane, "hello", f"m-{n}")
        before = journal_rows(conn)
        # This node's view of the bound is full: the send waits for a slot, then 503.
        outcome: list[BaseException] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(refusal, plane, "m-new", outcome)
            await trio.testing.wait_all_tasks_blocked()
            clock.jump(ADMISSION_WAIT_S)  # a sender waits this long for a slot
        # A view gone stale (as another node's may be) lets it through: the database
        # refuses it in the acceptance's own transaction.
        assert isinstance(plane.wake, ClusterWakeActor)
        plane.wake.admission.seen(0)
        await refusal(plane, "m-other", outcome)
        assert [type(e) for e in outcome] == [Overloaded, Overloaded]
        assert all(wire_identity(e).http_status == 503 for e in outcome)  # type: ignore[arg-type]
        assert journal_rows(conn) == before
        assert (await send(plane, "hello", "m-0")).disposition == "duplicate"


async def test_accepted_work_without_a_wake_row_gets_one_at_start_and_runs(
    tmp_path: Path, url: str, conn: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    first = Agent()
    async with node_plane(tmp_path, url, first) as plane:
        accepted = await send(plane, "block:go", "m-1")
        assert accepted.task is not None
        with trio.fail_after(30):
            await first.wait_turns(1)
    # As on a database from before the wake rows: the Task is accepted, not settled.
    conn.execute("TRUNCATE wakes, wake_lanes")
    again = Agent()
    again.open("go")
    async with node_plane(tmp_path, url, again) as plane:
        task = await settle(plane, accepted.task.id)
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        restored = [r for r in events(caplog, "wakes_restored")]
        assert [getattr(r, "count", None) for r in restored] == [1]
        assert plane.wake.statistics().turns_started == 1
    # Every start restores what is missing, and nothing twice.
    assert count_wakes(conn, accepted.activation_id) == 1


def count_wakes(conn: psycopg.Connection[Any], activation_id: str) -> int:
    row = conn.execute(
        "SELECT count(*) FROM wakes WHERE activation_id = %s", (activation_id,)
    ).fetchone()
    assert row is not None
    return int(row[0])


async def fail_three_turns_then_hold(agent: Agent, turn: Turn) -> None:
    if turn.n <= 3:
        raise RuntimeError(f"turn {turn.n} failed")
    await agent.gate("hold").wait()


async def test_a_recovery_pause_is_a_row_on_database_time_and_the_wake_comes_back(
    tmp_path: Path, url: str, conn: psycopg.Connection[Any]
) -> None:
    agent = Agent(fail_three_turns_then_hold)
    async with node_plane(tmp_path, url, agent) as plane:
        accepted = await send(plane, "hello", "m-1")
        assert accepted.task is not None
        with trio.fail_after(30):
            # Three failed turns (three deliveries under one lease), then a pause of
            # 1 s on the database's clock; once due, any node claims it again (here
            # this one), under epoch 2, and its fourth delivery runs.
            await agent.wait_turns(4)
        rows = await journal(plane, task_id=accepted.task.id)
        unhealthy = await plane.store.evidence(record_type="activation.unhealthy")
        assert lease(conn, accepted.activation_id)[:3] == ("running", "node-a", 2)
    assert deliveries_of(rows, accepted.activation_id) == [1, 2, 3, 4]
    assert len(unhealthy) == 1
    assert [t.outcome for t in agent.turns] == ["raised"] * 3 + ["cancelled"]


def completed(url: str) -> int:
    """Tasks completed whose wake row is done, too."""
    with psycopg.connect(url, autocommit=True) as c:
        row = c.execute(
            "SELECT count(*) FROM tasks t JOIN wakes w ON w.task_id = t.task_id"
            " WHERE t.state = %s AND w.state = 'done'",
            (COMPLETED.name,),
        ).fetchone()
    assert row is not None
    return int(row[0])


async def test_two_planes_on_one_database_share_the_queue_and_never_run_a_task_twice(
    tmp_path: Path, url: str, conn: psycopg.Connection[Any]
) -> None:
    # Both nodes accept and both claim: each Task runs one turn, on one node.
    a_agent, b_agent = Agent(concurrency=2), Agent(concurrency=2)
    sends = 12
    async with (
        node_plane(tmp_path / "a", url, a_agent, "node-a") as a,
        node_plane(tmp_path / "b", url, b_agent, "node-b") as b,
    ):
        accepted = [await send((a, b)[n % 2], f"task {n}", f"m-{n}") for n in range(sends)]
        # A node's owners see only its own commits here (the event tail is apart):
        # read the outcome from the database itself.
        with trio.fail_after(60):
            while await trio.to_thread.run_sync(completed, url) < sends:
                pass
        nodes = dict(conn.execute("SELECT activation_id, node_id FROM wakes WHERE state = 'done'"))
    turns = a_agent.turns + b_agent.turns
    assert sorted(t.task_id for t in turns) == sorted(t.task.id for t in accepted if t.task)
    assert a_agent.violations == b_agent.violations == []
    assert set(nodes) == {t.activation_id for t in accepted}


async def test_an_acceptance_with_a_free_turn_slot_claims_its_wake_itself(
    tmp_path: Path, url: str, conn: psycopg.Connection[Any]
) -> None:
    # Design rule "A wake waits for its node": the node has a free turn slot and no
    # wake waits, so the acceptance's own statement writes the wake running under
    # this node's lease (epoch 1, no slot of the bound taken) and the turn runs
    # without a claim; the first delivery still reads no journal.
    agent = Agent()
    async with node_plane(tmp_path, url, agent) as plane:
        accepted = await send(plane, "block:hold", "m-1")
        assert accepted.task is not None
        with trio.fail_after(30):
            await agent.wait_turns(1)
        assert lease(conn, accepted.activation_id) == ("running", "node-a", 1, True)
        assert conn.execute("SELECT count(activation_id) FROM wake_slots").fetchone() == (0,)
        assert plane.wake.counters.wakes_claimed_at_acceptance == 1
        agent.open("hold")
        await settle(plane, accepted.task.id)
        with trio.fail_after(30):  # the turn's end is recorded just after its Task's
            while lease(conn, accepted.activation_id)[0] != "done":
                await trio.lowlevel.checkpoint()
        assert lease(conn, accepted.activation_id)[:3] == ("done", "node-a", 1)


async def test_a_duplicate_gives_its_turn_slot_back_for_the_next_acceptance(
    tmp_path: Path, url: str
) -> None:
    # One turn slot: a duplicate's acceptance held it and claimed nothing, so it is
    # free again and the next new send's acceptance claims its own turn.
    agent = Agent()
    async with node_plane(tmp_path, url, agent) as plane:
        first = await send(plane, "hello", "m-1")
        assert first.task is not None
        await settle(plane, first.task.id)
        with trio.fail_after(30):  # the turn's end recorded: its lease is given up
            while plane.wake.statistics().offered:
                await trio.lowlevel.checkpoint()
        again = await send(plane, "hello", "m-1")
        assert again.disposition == "duplicate"
        second = await send(plane, "hello again", "m-2")
        assert second.task is not None
        await settle(plane, second.task.id)
        assert plane.wake.counters.wakes_claimed_at_acceptance == 2


async def test_a_turn_claimed_at_acceptance_with_no_slot_left_is_given_back_to_the_queue(
    tmp_path: Path, url: str, conn: psycopg.Connection[Any]
) -> None:
    # An acceptance that outlived its caller is offered after its turn slot went
    # back, and the one slot is busy: the wake goes back to the queue at once (a
    # pause due now, anyone's), and runs once the slot frees, epoch 2.
    agent = Agent()
    async with node_plane(tmp_path, url, agent) as plane:
        held = await send(plane, "block:hold", "m-0")
        with trio.fail_after(30):
            await agent.wait_turns(1)
        turn = TurnClaim("node-a", TTL_S)
        accepted = await plane.store.accept(activation("m-late"), LOCATOR, NOW, turn=turn)
        assert accepted.fence is not None and accepted.stored is not None
        task = accepted.stored.task
        plane.wake.offer(
            Wake(accepted.activation_id, task.id, task.context_id, fence=accepted.fence)
        )
        with trio.fail_after(30):
            while lease(conn, accepted.activation_id)[0] != "paused":
                await trio.lowlevel.checkpoint()
        assert held.task is not None and agent.running is not None
        agent.open("hold")
        with trio.fail_after(30):
            await agent.wait_turns(2)
        assert lease(conn, accepted.activation_id)[1:3] == ("node-a", 2)
    assert plane.wake.counters.wakes_claimed_at_acceptance == 1  # the held one only


async def test_a_wake_its_node_cannot_take_runs_on_another_node_after_the_grace(
    tmp_path: Path, url: str, conn: psycopg.Connection[Any]
) -> None:
    # Design rule "A wake waits for its node": node-a accepts both sends; its one
    # turn slot is busy with the first, so node-b, idle, takes the second once the
    # grace is over on the database's clock (node-a's doorbell or its own poll), not before.
    a_agent, b_agent = Agent(), Agent()
    async with (
        node_plane(tmp_path / "a", url, a_agent, "node-a") as a,
        node_plane(tmp_path / "b", url, b_agent, "node-b"),
    ):
        first = await send(a, "block:hold", "m-1")
        with trio.fail_after(30):
            await a_agent.wait_turns(1)
        second = await send(a, "second", "m-2")
        with trio.fail_after(30):
            await b_agent.wait_turns(1)
        a_agent.open("hold")
        waited = conn.execute(
            "SELECT extract(epoch FROM lease_until - queued_at) - %s FROM wakes"
            " WHERE activation_id = %s",
            (TTL_S, second.activation_id),
        ).fetchone()
        assert lease(conn, first.activation_id)[1] == "node-a"
        assert lease(conn, second.activation_id)[1:3] == ("node-b", 1)
    assert waited is not None and float(waited[0]) >= wakes.AFFINITY_S


def test_the_shared_bound_counts_this_nodes_claims_between_two_reads() -> None:
    # Between two reads of the figures (one per poll) the view is the last read, plus
    # this node's committed acceptances, less the slots its own claims freed.
    bound = SharedBound()
    bound.seen(5)
    bound.reserve()  # an acceptance committing on this node
    bound.used()  # ... committed: its wake holds a slot
    bound.freed(2)
    assert bound.waiting == 4
    bound.freed(10)  # slots taken through other nodes are not this node's to free
    assert bound.waiting == 0
    bound.seen(7)  # the next read is the truth again
    assert bound.waiting == 7


async def test_a_claim_reads_the_queue_figures_only_when_asked(url: str) -> None:
    rows = PgWakeRows(url, "node-a", TTL_S)
    try:
        async with open_pg_store(url) as store:
            await store.accept(activation("m-0"), LOCATOR, NOW)
            (claimed,), none = await rows.claim(1, (), figures=False)
            assert none is None and claimed.freed_slot
            await store.accept(activation("m-1"), LOCATOR, NOW)
            assert await rows.claim(0, (), figures=True) == ([], QueueFigures(1, 0))
    finally:
        rows.close()
