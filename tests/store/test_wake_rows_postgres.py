"""The wake queue as rows on PostgreSQL (``taskplane.store.postgres.wakes``).

The cluster-wide bound (an acceptance with every slot taken records nothing and is
refused with 503), fenced writes (a write under a stale epoch records nothing), the
guarded claim under the READ COMMITTED trap that double-claims with the naive query
(driven deterministically: one claimer waits on the lane lock while another claims
and finishes the wake), and a hypothesis state machine running two claimers on one
database against a model of the queue (the bound, per-context order, FIFO among
the wakes a node may take, a fresh wake left to the node that accepted it, reclaim
with epoch + 1, no double claim).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from functools import partial
from typing import Any

import attrs
import hypothesis.strategies as st
import psycopg
import pytest
import trio
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from taskplane.actors.admission_limits import WAKE_QUEUE_SIZE
from taskplane.actors.wake_queue import Wake
from taskplane.errors import Fenced, Overloaded
from taskplane.store.postgres import wakes
from taskplane.store.postgres.database import open_connections
from taskplane.store.postgres.schema import WAKE_SLOTS, Connection
from taskplane.store.records import (
    Accepted,
    Fence,
    JournalRecord,
    PendingActivation,
    TaskChange,
    TurnClaim,
)
from taskplane.store.wake_rows import Renewal, lane_of
from tests.store.backends import open_pg_store
from tests.store.contract import COMPLETED, LOCATOR, NOW, activation, asking, moved, stored_of
from tests.support.pg import Cluster
from tests.support.wakes import WAKES, shares_a_lane

TTL_S = 15.0


def migrated(url: str) -> None:
    for session in open_connections(url, 1):
        session.close()


def connect(url: str) -> Connection:
    return psycopg.connect(url, autocommit=True)


def run(conn: Connection, op: Any, *args: Any) -> Any:
    with conn.transaction():
        return op(conn, *args)


def count(conn: Connection, sql: str, *args: Any) -> int:
    row = conn.execute(sql, args).fetchone()
    assert row is not None
    return int(row[0])


def expire(conn: Connection, activation_id: str) -> None:
    """The lease of ``activation_id`` ran out on the database's clock."""
    conn.execute(
        "UPDATE wakes SET lease_until = now() - interval '1 second' WHERE activation_id = %s",
        (activation_id,),
    )


@pytest.fixture
def url(pg_cluster: Cluster) -> str:
    url = pg_cluster.fresh_store_url()
    migrated(url)
    return url


@pytest.fixture
def conn(url: str) -> Iterator[Connection]:
    with connect(url) as c:
        yield c


# --- the bound ------------------------------------------------------------------------


def test_the_slot_rows_are_the_wake_queue_bound(conn: Connection) -> None:
    assert WAKE_SLOTS == WAKE_QUEUE_SIZE == 128
    assert count(conn, "SELECT count(*) FROM wake_slots WHERE activation_id IS NULL") == 128


async def test_an_acceptance_with_every_slot_taken_records_nothing_and_answers_503(
    url: str, conn: Connection
) -> None:
    async with open_pg_store(url) as store:
        await store.accept(activation("m-0"), LOCATOR, NOW)
        for n in range(1, WAKE_QUEUE_SIZE):
            await store.accept(activation(f"m-{n}"), LOCATOR, NOW)
        journal = count(conn, "SELECT count(*) FROM journal")
        tasks = count(conn, "SELECT count(*) FROM tasks")
        with pytest.raises(Overloaded) as refused:
            await store.accept(activation("m-new"), LOCATOR, NOW)
        assert refused.value.retry_after_s == 1
        # Nothing was written; a duplicate still gets its prior answer.
        assert count(conn, "SELECT count(*) FROM journal") == journal
        assert count(conn, "SELECT count(*) FROM tasks") == tasks
        assert count(conn, "SELECT count(*) FROM wakes") == WAKE_QUEUE_SIZE
        duplicate = await store.accept(activation("m-0"), LOCATOR, NOW)
        assert duplicate.disposition == "duplicate"
        # A claim frees a slot: the next new Task is accepted.
        (claimed,) = run(conn, wakes.claim, "node-a", TTL_S, 1)
        assert claimed.fence.epoch == 1
        accepted = await store.accept(activation("m-new"), LOCATOR, NOW)
        assert accepted.disposition == "created"


async def test_a_continuation_with_every_slot_taken_is_refused_and_records_nothing(
    url: str, conn: Connection
) -> None:
    async with open_pg_store(url) as store:
        first = stored_of(await store.accept(activation("m-0"), LOCATOR, NOW))
        waiting = await store.apply(TaskChange(first, asking(first.task, NOW), NOW))
        conn.execute("DELETE FROM wake_slots WHERE activation_id IS NULL")  # the rest taken
        journal = count(conn, "SELECT count(*) FROM journal")
        for act in (
            activation("m-1", task_id=first.task.id),  # a continuation
            activation("m-2", context_id=first.task.context_id),  # a new Task in its context
        ):
            with pytest.raises(Overloaded):
                await store.accept(act, LOCATOR, NOW)
        assert count(conn, "SELECT count(*) FROM journal") == journal
        assert await store.find_task(first.task.id) == waiting


async def test_concurrent_acceptances_take_the_free_slots_and_the_rest_record_nothing(
    url: str, conn: Connection
) -> None:
    # Concurrent plain acceptances share batches (one statement for all of them); one
    # with fewer free slots than new Tasks is run again op by op, each alone.
    conn.execute("DELETE FROM wake_slots WHERE slot >= 3")  # a bound of 3
    outcomes: list[str] = []

    async def one(n: int) -> None:
        try:
            accepted = await store.accept(activation(f"m-{n}"), LOCATOR, NOW)
        except Overloaded:
            outcomes.append("refused")
        else:
            outcomes.append(accepted.disposition)

    async with open_pg_store(url) as store:
        async with trio.open_nursery() as nursery:
            for n in range(6):
                nursery.start_soon(one, n)
    assert sorted(outcomes) == ["created"] * 3 + ["refused"] * 3
    assert store.statistics().largest_batch > 1
    assert count(conn, "SELECT count(*) FROM journal WHERE kind = 'CLAIM'") == 3
    assert count(conn, "SELECT count(*) FROM tasks") == 3
    assert count(conn, "SELECT count(*) FROM wakes") == 3
    assert count(conn, "SELECT count(activation_id) FROM wake_slots") == 3


# --- a wake claimed by its acceptance ----------------------------------------------------


def wake_row(conn: Connection, activation_id: str) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT w.state, w.node_id, w.epoch, w.lease_until > now(), l.running_activation"
        " FROM wakes w JOIN wake_lanes l ON l.lane = w.lane WHERE w.activation_id = %s",
        (activation_id,),
    ).fetchone()
    assert row is not None
    return tuple(row)


async def test_a_new_task_accepted_with_a_turn_claim_is_born_running_and_takes_no_slot(
    url: str, conn: Connection
) -> None:
    # Design rule "A wake waits for its node": concurrent plain acceptances share one
    # statement; those given a TurnClaim write their wake running under its lease
    # (epoch 1, lane marked, no slot), the others queue theirs as before. A
    # continuation is never claimed that way (its context may hold earlier wakes), a
    # duplicate claims nothing, and the claimed wake's first claim is its acceptance:
    # the next claim finds only the queued ones.
    turn = TurnClaim("node-a", TTL_S)
    outcomes: dict[int, Accepted] = {}

    async def one(n: int) -> None:
        act = activation(f"m-{n}")
        outcomes[n] = await store.accept(act, LOCATOR, NOW, turn=turn if n % 2 else None)

    async with open_pg_store(url, "node-a") as store:
        async with trio.open_nursery() as nursery:
            for n in range(8):
                nursery.start_soon(one, n)
        assert store.statistics().largest_batch > 1
        for n, accepted in outcomes.items():
            if n % 2:
                assert accepted.fence == Fence(accepted.activation_id, 1, "node-a")
                assert wake_row(conn, accepted.activation_id) == (
                    "running",
                    "node-a",
                    1,
                    True,
                    accepted.activation_id,
                )
            else:
                assert accepted.fence is None
                assert wake_row(conn, accepted.activation_id)[:3] == ("pending", None, 0)
        assert count(conn, "SELECT count(activation_id) FROM wake_slots") == 4
        duplicate = await store.accept(activation("m-1"), LOCATOR, NOW, turn=turn)
        assert duplicate.disposition == "duplicate" and duplicate.fence is None
        first = stored_of(outcomes[1])
        await store.apply(TaskChange(first, asking(first.task, NOW), NOW, fence=outcomes[1].fence))
        assert run(conn, wakes.complete, outcomes[1].fence)
        continued = await store.accept(
            activation("m-c", task_id=first.task.id), LOCATOR, NOW, turn=turn
        )
        assert continued.disposition == "continued" and continued.fence is None
    claimed = run(conn, wakes.claim, "node-a", TTL_S, 10)
    queued = {a.activation_id for n, a in outcomes.items() if n % 2 == 0}
    assert {c.fence.activation_id for c in claimed} == queued | {continued.activation_id}


# --- fencing --------------------------------------------------------------------------


async def test_a_write_under_a_stale_epoch_is_refused_and_records_nothing(
    url: str, conn: Connection
) -> None:
    async with open_pg_store(url) as store:
        stored = stored_of(await store.accept(activation("m-0"), LOCATOR, NOW))
        (a,) = run(conn, wakes.claim, "node-a", TTL_S, 1)
        record = JournalRecord("WOKEN", a.fence.activation_id, a.task_id, {"wokenAt": NOW})
        await store.append((record,), NOW, fence=a.fence)  # current: recorded
        expire(conn, a.fence.activation_id)
        (b,) = run(conn, wakes.claim, "node-b", TTL_S, 1)
        assert (b.fence.epoch, b.reclaimed) == (2, True)
        journal = count(conn, "SELECT count(*) FROM journal")
        change = TaskChange(stored, moved(stored.task, COMPLETED, NOW), NOW, (record,), a.fence)
        with pytest.raises(Fenced):
            await store.apply(change)
        with pytest.raises(Fenced):
            await store.append((record,), NOW, fence=a.fence)
        for stale in (Fence(a.fence.activation_id, 2, "node-a"), attrs.evolve(b.fence, epoch=1)):
            with pytest.raises(Fenced):
                await store.append((record,), NOW, fence=stale)
        assert count(conn, "SELECT count(*) FROM journal") == journal
        assert await store.find_task(stored.task.id) == stored
        # The holder's lease is current: its change commits; an expired one is refused.
        done = await store.apply(attrs.evolve(change, fence=b.fence))
        assert done.task.status.state == COMPLETED
        assert not run(conn, wakes.complete, a.fence)
        expire(conn, b.fence.activation_id)
        assert run(conn, wakes.renew, [b.fence], TTL_S) == Renewal(frozenset())
        with pytest.raises(Fenced):
            await store.append((record,), NOW, fence=b.fence)


def test_a_renewal_never_waits_for_a_write_holding_its_lease_row(
    url: str, conn: Connection
) -> None:
    # A fenced write holds its lease row FOR SHARE until its batch commits; a renewal
    # that waited for it while that batch waited for another row the renewal holds
    # would deadlock. So the renewal skips the held row (busy: still current, not
    # renewed, not lost) and renews it once the write committed.
    run(conn, wakes.enqueue, "act-0", "task-0", "ctx-0")
    run(conn, wakes.enqueue, "act-1", "task-1", "ctx-1")
    held, other = run(conn, wakes.claim, "node-a", TTL_S, 2)
    with connect(url) as writer, writer.transaction():
        wakes.check_fences(writer, [held.fence])  # a write's fence check, not committed
        renewal = run(conn, wakes.renew, [held.fence, other.fence], TTL_S)
        assert renewal == Renewal(
            frozenset({other.fence.activation_id}), frozenset({held.fence.activation_id})
        )
    renewal = run(conn, wakes.renew, [held.fence, other.fence], TTL_S)
    assert renewal.renewed == {held.fence.activation_id, other.fence.activation_id}


# --- the accepted source (a first delivery without journal reads) -----------------------


async def test_only_the_first_claim_of_an_accepted_wake_carries_its_source_and_frees_a_slot(
    url: str, conn: Connection
) -> None:
    # A wake queued by its acceptance (plain, or a continuation) carries the Task's
    # source to its first claim (epoch 1: never delivered), so that delivery reads no
    # journal; a reclaim (epoch 2) or a resumed pause carries none, so the delivery
    # cap reads every delivery from the journal; a restored wake carries none.
    async with open_pg_store(url) as store:
        plain = stored_of(await store.accept(activation("m-0", source="a2a"), LOCATOR, NOW))
        (first,) = run(conn, wakes.claim, "node-a", TTL_S, 1)
        assert (first.fence.epoch, first.accepted_source, first.freed_slot) == (1, "a2a", True)
        assert first.task_id == plain.task.id
        expire(conn, first.fence.activation_id)
        (again,) = run(conn, wakes.claim, "node-b", TTL_S, 1)
        assert (again.fence.epoch, again.reclaimed, again.accepted_source) == (2, True, None)
        assert not again.freed_slot  # a reclaimed wake holds no slot
        assert run(conn, wakes.pause, again.fence, 0.0)
        (resumed,) = run(conn, wakes.claim, "node-a", TTL_S, 1)
        assert (resumed.fence.epoch, resumed.accepted_source) == (3, None)
        assert run(conn, wakes.complete, resumed.fence)
        await store.apply(TaskChange(plain, asking(plain.task, NOW), NOW))
        await store.accept(activation("m-1", task_id=plain.task.id), LOCATOR, NOW)
        (continued,) = run(conn, wakes.claim, "node-a", TTL_S, 1)
        assert (continued.fence.epoch, continued.accepted_source) == (1, "a2a")
    assert run(conn, wakes.complete, continued.fence)
    assert run(conn, wakes.restore, [PendingActivation("act-r", "task-r", "ctx-r")]) == 1
    (restored,) = run(conn, wakes.claim, "node-a", TTL_S, 1)
    assert (restored.fence.epoch, restored.accepted_source, restored.freed_slot) == (1, None, False)


# --- a wake waits for its node ----------------------------------------------------------


def age(conn: Connection, activation_id: str, seconds: float = 3600.0) -> None:
    """``activation_id`` has waited ``seconds`` on the database's clock (by default
    past the grace of its node, and past ``STARVATION_S``)."""
    conn.execute(
        "UPDATE wakes SET queued_at = now() - make_interval(secs => %s) WHERE activation_id = %s",
        (seconds, activation_id),
    )


def test_a_node_takes_another_nodes_wake_after_its_own_until_that_wake_starves(
    conn: Connection,
) -> None:
    # Past the grace, node-b takes node-a's older wake only after its own; once that
    # wake has waited past STARVATION_S, age alone orders.
    run(conn, wakes.enqueue, "act-a", "task-a", "ctx-a", "a2a", "node-a")
    run(conn, wakes.enqueue, "act-b1", "task-b1", "ctx-b1", "a2a", "node-b")
    run(conn, wakes.enqueue, "act-b2", "task-b2", "ctx-b2", "a2a", "node-b")
    age(conn, "act-a", wakes.AFFINITY_S + 0.5)
    (first, second) = run(conn, wakes.claim, "node-b", TTL_S, 2)
    assert [first.fence.activation_id, second.fence.activation_id] == ["act-b1", "act-b2"]
    run(conn, wakes.enqueue, "act-b3", "task-b3", "ctx-b3", "a2a", "node-b")
    age(conn, "act-a", wakes.STARVATION_S + 1)
    (oldest,) = run(conn, wakes.claim, "node-b", TTL_S, 1)
    assert oldest.fence == Fence("act-a", 1, "node-b")


def test_a_fresh_wake_is_left_to_its_node_for_the_grace_then_any_node_takes_it(
    conn: Connection,
) -> None:
    # Design rule "A wake waits for its node": node-a accepted act-a, so for the grace
    # node-b passes over it (and, its lane being blocked, over its lane's later wake)
    # and takes the older-queued wake nobody prefers; once the grace is over on the
    # database's clock, node-b takes act-a too.
    run(conn, wakes.enqueue, "act-a", "task-a", "ctx-1", "a2a", "node-a")
    run(conn, wakes.enqueue, "act-a2", "task-a2", "ctx-1", "a2a")
    run(conn, wakes.enqueue, "act-n", "task-n", "ctx-2", "a2a")
    (first,) = run(conn, wakes.claim, "node-b", TTL_S, 3)
    assert first.fence.activation_id == "act-n"
    assert run(conn, wakes.claim, "node-b", TTL_S, 3) == []
    age(conn, "act-a")
    (taken,) = run(conn, wakes.claim, "node-b", TTL_S, 3)
    assert taken.fence == Fence("act-a", 1, "node-b")


def test_the_accepting_node_takes_its_wake_at_once_and_a_paused_wake_is_anyones(
    conn: Connection,
) -> None:
    run(conn, wakes.enqueue, "act-a", "task-a", "ctx-1", "a2a", "node-a")
    (mine,) = run(conn, wakes.claim, "node-a", TTL_S, 1)
    assert mine.fence == Fence("act-a", 1, "node-a")
    assert run(conn, wakes.pause, mine.fence, 0.0)  # back in the queue, no node's
    (resumed,) = run(conn, wakes.claim, "node-b", TTL_S, 1)
    assert resumed.fence == Fence("act-a", 2, "node-b")


# --- the READ COMMITTED trap ----------------------------------------------------------


def test_a_claim_whose_pick_went_stale_moves_nothing_and_picks_again(
    url: str, conn: Connection
) -> None:
    # What a pick read before its lane lock may be stale: another node claimed the
    # wake and finished it meanwhile. The move re-checks state and epoch, so the stale
    # pick moves nothing (and the claim picks again).
    run(conn, wakes.enqueue, "act-0", "task-0", "ctx")
    (stale,) = conn.execute(
        "SELECT activation_id, state, epoch FROM wakes WHERE activation_id = 'act-0'"
    ).fetchall()
    (other,) = run(conn, wakes.claim, "node-b", TTL_S, 1)
    assert run(conn, wakes.complete, other.fence)
    activation_id, state, epoch = stale
    assert run(conn, wakes.move, "node-a", TTL_S, activation_id, state, epoch) is None
    assert run(conn, wakes.claim, "node-a", TTL_S, 1) == []
    assert count(conn, "SELECT epoch FROM wakes WHERE activation_id = 'act-0'") == 1


CLAIMERS = 4
LANES = 5
PER_LANE = 40


def test_claimers_racing_on_one_database_never_claim_a_wake_twice_or_out_of_order(
    url: str, conn: Connection
) -> None:
    # Four sessions claim and finish wakes as fast as they can (each claim its own
    # transaction, each finish another): the unguarded claim double-claims here under
    # READ COMMITTED (a lane lock re-checks only the lane row's new version).
    conn.execute("DELETE FROM wake_slots")
    conn.execute("INSERT INTO wake_slots (slot) SELECT generate_series(0, %s)", (LANES * PER_LANE,))
    for n in range(PER_LANE):
        for lane in range(LANES):
            run(conn, wakes.enqueue, f"act-{lane}-{n}", f"task-{lane}-{n}", f"ctx-{lane}")
    claims: list[tuple[str, int, str]] = []
    lock = threading.Lock()

    def claimer(node: str) -> None:
        with connect(url) as c:
            idle = 0
            while idle < 20:
                got = run(c, wakes.claim, node, TTL_S, 1)
                if not got:
                    idle += 1
                    continue
                idle = 0
                (claimed,) = got
                with lock:
                    claims.append((claimed.fence.activation_id, claimed.fence.epoch, node))
                assert run(c, wakes.complete, claimed.fence)

    threads = [threading.Thread(target=claimer, args=(f"node-{n}",)) for n in range(CLAIMERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    claimed_ids = [a for a, _, _ in claims]
    assert len(claimed_ids) == len(set(claimed_ids)) == LANES * PER_LANE
    assert {e for _, e, _ in claims} == {1}
    for lane in range(LANES):
        order = [int(a.rsplit("-", 1)[1]) for a in claimed_ids if a.startswith(f"act-{lane}-")]
        assert order == list(range(PER_LANE)), order
    assert count(conn, "SELECT count(*) FROM wakes WHERE state <> 'done'") == 0


# --- two claimers against a model -----------------------------------------------------


@attrs.define
class Row:
    """The model of one wake row (``expired``: its lease ran out on the database's
    clock; ``due``: a paused row's ``not_before`` has passed)."""

    wake: Wake
    seq: int
    state: str = "pending"
    node: str | None = None
    epoch: int = 0
    expired: bool = False
    due: bool = True
    slot: bool = True
    by: str | None = None
    """The node whose acceptance queued it (``None``: no node's; cleared once it was
    claimed or paused)."""
    wait: str = "fresh"
    """How long it has waited: ``fresh`` (within its node's grace), ``graced`` (past
    it), ``starved`` (past the starvation bound)."""

    @property
    def lane(self) -> str:
        return lane_of(self.wake.task_id, self.wake.context_id)


NODES = ("node-a", "node-b")
GRACE_S = 3600.0
"""The model's claims leave a wake to its node this long: its grace ends only when
a rule says so (``time_passes``), never by the test's own pace."""
STARVE_S = 3 * GRACE_S
"""The model's starvation bound (likewise)."""
WAITED_S = {"graced": GRACE_S + 60.0, "starved": STARVE_S + 60.0}


class TwoClaimers(RuleBasedStateMachine):
    """Two nodes claim from one database; a list of rows is the model. The bound is
    ``limit`` slots (the rest deleted), so "full" is reached often."""

    conn: Connection

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[Row] = []
        self.limit = 0
        self.seq = 0
        self.reads: list[tuple[str, str, int]] = []
        """(activation, state, epoch) as a pick read them, before its lane lock."""

    @initialize(limit=st.integers(min_value=1, max_value=4))
    def start(self, limit: int) -> None:
        c = self.conn
        c.execute("TRUNCATE wakes, wake_lanes")
        c.execute("DELETE FROM wake_slots")
        c.execute("INSERT INTO wake_slots (slot) SELECT generate_series(0, %s)", (limit - 1,))
        self.limit = limit

    def _row(self, activation_id: str) -> Row | None:
        return next((r for r in self.rows if r.wake.activation_id == activation_id), None)

    @rule(wake=st.sampled_from(WAKES), by=st.sampled_from((None, *NODES)))
    def accept(self, wake: Wake, by: str | None) -> None:
        if self._row(wake.activation_id) is not None:
            return  # an activation is accepted once (its claim is unique)
        full = sum(r.slot for r in self.rows) >= self.limit
        try:
            run(
                self.conn,
                wakes.enqueue,
                wake.activation_id,
                wake.task_id,
                wake.context_id,
                None,
                by,
            )
        except Overloaded:
            assert full
            return
        assert not full
        self.seq += 1
        self.rows.append(Row(wake, self.seq, by=by))

    @precondition(lambda self: any(r.by is not None for r in self.rows))
    @rule(data=st.data(), wait=st.sampled_from(("graced", "starved")))
    def time_passes(self, data: st.DataObject, wait: str) -> None:
        r = data.draw(st.sampled_from([r for r in self.rows if r.by is not None]))
        age(self.conn, r.wake.activation_id, WAITED_S[wait])
        r.wait = wait

    def _expected(self, node: str) -> Row | None:
        def live(r: Row) -> bool:
            return r.state != "done" and not (r.state == "paused" and not r.due)

        def later(r: Row) -> bool:  # another node's, past its grace, not starved
            return r.state != "running" and r.by not in (None, node) and r.wait == "graced"

        running = {r.lane: r for r in self.rows if r.state == "running"}
        for r in sorted(self.rows, key=lambda r: (later(r), r.seq)):
            if r.state == "running":
                if r.expired:
                    return r
                continue
            if not live(r) or r.lane in running:
                continue
            earlier = [e for e in self.rows if e.lane == r.lane and e.seq < r.seq and live(e)]
            if not earlier and (r.by in (None, node) or r.wait != "fresh"):
                return r
        return None

    @rule(node=st.sampled_from(NODES), limit=st.integers(1, 3))
    def claim(self, node: str, limit: int) -> None:
        # One statement claims up to ``limit`` wakes: as many claims of one, in order,
        # each the first this node may take (its own, no node's or past its grace),
        # other nodes' after its own until they starve.
        claim = partial(wakes.claim, affinity_s=GRACE_S, starvation_s=STARVE_S)
        claimed = run(self.conn, claim, node, TTL_S, limit)
        for n in range(limit):
            expected = self._expected(node)
            if expected is None:
                assert len(claimed) == n
                return
            got = claimed[n]
            assert got.fence.activation_id == expected.wake.activation_id
            assert got.reclaimed == (expected.state == "running")
            assert got.freed_slot == expected.slot
            expected.epoch += 1
            assert got.fence == Fence(expected.wake.activation_id, expected.epoch, node)
            expected.state, expected.node, expected.expired, expected.slot = (
                "running",
                node,
                False,
                False,
            )
            expected.by, expected.wait = None, "fresh"
        assert len(claimed) == limit

    @precondition(lambda self: bool(self.rows))
    @rule(data=st.data())
    def pick_reads(self, data: st.DataObject) -> None:
        r = data.draw(st.sampled_from(self.rows))
        self.reads.append((r.wake.activation_id, r.state, r.epoch))

    @precondition(lambda self: bool(self.reads))
    @rule(data=st.data(), node=st.sampled_from(NODES))
    def move_after_a_stale_read(self, data: st.DataObject, node: str) -> None:
        # The READ COMMITTED trap: the lane lock re-checked only the lane row, and the
        # wake this pick read has moved since (claimed, finished, paused, reclaimed).
        # The guarded move refuses it; an unguarded one would claim it twice.
        activation_id, state, epoch = data.draw(st.sampled_from(self.reads))
        r = self._row(activation_id)
        assert r is not None
        if (r.state, r.epoch) == (state, epoch):
            return  # not stale: the pick's lane lock would have held
        assert run(self.conn, wakes.move, node, TTL_S, activation_id, state, epoch) is None

    def _running(self) -> list[Row]:
        return [r for r in self.rows if r.state == "running"]

    @precondition(lambda self: any(r.state == "running" for r in self.rows))
    @rule(data=st.data(), stale=st.booleans())
    def complete(self, data: st.DataObject, stale: bool) -> None:
        r = data.draw(st.sampled_from(self._running()))
        assert r.node is not None
        fence = Fence(r.wake.activation_id, r.epoch - stale, r.node)
        current = not stale and not r.expired
        assert run(self.conn, wakes.complete, fence) == current
        if current:
            r.state = "done"

    @precondition(lambda self: any(r.state == "running" for r in self.rows))
    @rule(data=st.data(), due=st.booleans())
    def pause(self, data: st.DataObject, due: bool) -> None:
        r = data.draw(st.sampled_from(self._running()))
        assert r.node is not None
        fence = Fence(r.wake.activation_id, r.epoch, r.node)
        current = not r.expired
        assert run(self.conn, wakes.pause, fence, 0.0 if due else 3600.0) == current
        if current:
            self.seq += 1
            r.state, r.node, r.due, r.seq, r.by = "paused", None, due, self.seq, None
            r.wait = "fresh"

    @precondition(lambda self: any(r.state == "running" for r in self.rows))
    @rule(data=st.data())
    def lease_runs_out(self, data: st.DataObject) -> None:
        r = data.draw(st.sampled_from(self._running()))
        expire(self.conn, r.wake.activation_id)
        r.expired = True

    @precondition(lambda self: any(r.state == "running" for r in self.rows))
    @rule(data=st.data())
    def write_under_the_fence(self, data: st.DataObject) -> None:
        r = data.draw(st.sampled_from(self._running()))
        assert r.node is not None
        for node in NODES:
            for epoch in (r.epoch - 1, r.epoch):
                fence = Fence(r.wake.activation_id, epoch, node)
                current = node == r.node and epoch == r.epoch and not r.expired
                if current:
                    run(self.conn, wakes.check_fences, [fence])
                else:
                    with pytest.raises(Fenced):
                        run(self.conn, wakes.check_fences, [fence])

    @invariant()
    def matches_the_model(self) -> None:
        found = {
            a: (s, n, e)
            for a, s, n, e in self.conn.execute(
                "SELECT activation_id, state, node_id, epoch FROM wakes"
            ).fetchall()
        }
        model = {r.wake.activation_id: (r.state, r.node, r.epoch) for r in self.rows}
        for a, (state, node, epoch) in model.items():
            assert found[a][0] == state and found[a][2] == epoch, a
            if state == "running":
                assert found[a][1] == node
        assert set(found) == set(model)
        taken = count(self.conn, "SELECT count(activation_id) FROM wake_slots")
        assert taken == sum(r.slot for r in self.rows) <= self.limit

    @invariant()
    def no_two_running_wakes_share_a_lane(self) -> None:
        running = [r.wake for r in self._running()]
        for n, a in enumerate(running):
            for b in running[n + 1 :]:
                assert not shares_a_lane(a, b)
        lanes = dict(
            self.conn.execute("SELECT lane, running_activation FROM wake_lanes").fetchall()
        )
        for r in self._running():
            assert lanes[r.lane] == r.wake.activation_id


def test_two_claimers_on_one_database_keep_the_bound_the_order_and_one_holder(url: str) -> None:
    with connect(url) as conn:
        TwoClaimers.conn = conn
        TwoClaimers.TestCase.settings = settings(
            max_examples=40,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        )
        TwoClaimers.TestCase().runTest()
