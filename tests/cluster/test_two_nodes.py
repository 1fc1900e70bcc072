"""Two nodes on one database: live updates, blocking sends, cancels and claims cross
from one node to the other (design rules "Streaming shows what happens after you
connect", "A blocking send is bounded", "Cancel stops the running turn" and
"Idempotent intake", on several nodes). The wake queue is shared, so either node may
claim a send's turn: each test finds the node running it (the runner) and asks the
other (the watcher).

Unless a test says otherwise the tails' polls are an hour apart, so what crosses does
so by the doorbell alone."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest
import trio

from taskplane.actors.admission_limits import WAKE_QUEUE_SIZE
from taskplane.cluster import claims as claims_tail
from taskplane.cluster import events
from taskplane.errors import Overloaded, Transient
from taskplane.model.enums import TaskState
from taskplane.model.types import StreamResponse
from taskplane.store.postgres import doorbell
from tests.cluster.nodes import Node, open_node
from tests.support.agent import Agent, Turn, behave
from tests.support.pg import Cluster
from tests.support.virtual import ALICE, message, send

COMPLETED = TaskState.TASK_STATE_COMPLETED
CANCELED = TaskState.TASK_STATE_CANCELED
OUTPUTS = 5


async def outputs_then_complete(agent: Agent, turn: Turn) -> None:
    """``block:<gate>`` as usual; else wait for gate ``go``, record :data:`OUTPUTS`
    outputs, then complete (one committed version each)."""
    if (
        (await turn.tools.a2a_read_task(turn.task_id))
        .details["task"]
        .history[-1]
        .parts[0]
        .text.startswith("block:")
    ):
        await behave(agent, turn)
        return
    await agent.gate("go").wait()
    for n in range(1, OUTPUTS + 1):
        await turn.tools.a2a_record_output(turn.task_id, "pull-request", {"n": n})
    await turn.tools.a2a_complete_task(turn.task_id, "done")


@pytest.fixture
def poll_s(monkeypatch: pytest.MonkeyPatch) -> float:
    """The tails' poll interval (an hour: only doorbells cross)."""
    monkeypatch.setattr(events, "POLL_S", 3600.0)
    monkeypatch.setattr(claims_tail, "CLAIMS_POLL_S", 3600.0)
    return 3600.0


@pytest.fixture
def url(pg_cluster: Cluster) -> str:
    """The two nodes' database."""
    return pg_cluster.fresh_store_url()


@pytest.fixture
async def nodes(url: str, tmp_path: Path, poll_s: float) -> AsyncIterator[tuple[Node, Node]]:
    async with (
        open_node(url, tmp_path, "node-a", Agent(outputs_then_complete)) as a,
        open_node(url, tmp_path, "node-b", Agent(outputs_then_complete)) as b,
    ):
        yield a, b


async def runner_of(*nodes: Node) -> tuple[Node, Node]:
    """The node whose agent started the first turn, and the other node."""
    found: list[Node] = []
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:

            async def watch(node: Node) -> None:
                await node.agent.wait_turns(1)
                found.append(node)
                nursery.cancel_scope.cancel()

            for node in nodes:
                nursery.start_soon(watch, node)
    runner = found[0]
    (watcher,) = [n for n in nodes if n is not runner]
    return runner, watcher


def frames_of(frames: list[StreamResponse]) -> list[str]:
    out = []
    for f in frames:
        if f.task is not None:
            out.append(f"task:{f.task.status.state.name}")
        elif f.artifact_update is not None:
            out.append(f"artifact:{f.artifact_update.artifact.parts[0].data}")
        elif f.status_update is not None:
            out.append(f"status:{f.status_update.status.state.name}")
    return out


async def collect(rx: trio.MemoryReceiveChannel[StreamResponse]) -> list[StreamResponse]:
    with trio.fail_after(20):
        return [f async for f in rx]


async def test_a_subscriber_on_b_sees_a_commits_in_version_order(
    nodes: tuple[Node, Node],
) -> None:
    accepted = await send(nodes[0].plane, "outputs", "m-1")
    a, b = await runner_of(*nodes)
    assert accepted.task is not None
    task_id = accepted.task.id
    on_b = await b.plane.subscribe(ALICE, task_id)
    on_a = await a.plane.subscribe(ALICE, task_id)
    a.agent.open("go")
    async with trio.open_nursery() as nursery:
        seen: dict[str, list[StreamResponse]] = {}

        async def gather(name: str, rx: trio.MemoryReceiveChannel[StreamResponse]) -> None:
            seen[name] = await collect(rx)

        nursery.start_soon(gather, "a", on_a)
        nursery.start_soon(gather, "b", on_b)
    # B's snapshot is what B knew when it subscribed: its doorbell may not have
    # brought A's WORKING yet, in which case that change follows as an update. From
    # there on B sees exactly what a subscriber on A sees, in version order.
    on_a_frames, on_b_frames = frames_of(seen["a"]), frames_of(seen["b"])
    assert on_b_frames[0].startswith("task:")
    later = on_b_frames[1:]
    if on_b_frames[0] == "task:TASK_STATE_SUBMITTED":
        assert later[0] == "status:TASK_STATE_WORKING"
        later = later[1:]
    assert later == on_a_frames[1:]
    assert later[:OUTPUTS] == [f"artifact:DataValue(value={{'n': {n}}})" for n in range(1, 6)]
    assert later[-1] == "status:TASK_STATE_COMPLETED"


async def test_a_blocking_send_on_b_settles_on_a_completion(nodes: tuple[Node, Node]) -> None:
    accepted = await send(nodes[0].plane, "block:done", "m-1")
    a, b = await runner_of(*nodes)
    settled: list[TaskState] = []

    async def wait_on_b() -> None:
        task = await b.plane.wait_settled(ALICE, accepted.task.id, 30)
        settled.append(task.status.state)

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_on_b)
            await trio.testing.wait_all_tasks_blocked(0.05)
            a.agent.open("done")
    assert settled == [COMPLETED]


async def test_a_cancel_on_b_stops_the_turn_running_on_a(nodes: tuple[Node, Node]) -> None:
    accepted = await send(nodes[0].plane, "block:never", "m-1")
    a, b = await runner_of(*nodes)
    (turn,) = a.agent.turns
    canceled = await b.plane.cancel(ALICE, accepted.task.id)
    assert canceled.status.state is CANCELED
    with trio.fail_after(20):
        await a.agent.wait_turns(1, ended=True)
    assert turn.outcome == "cancelled"
    assert not b.agent.turns  # the turn ran on the runner only
    assert (await a.plane.get_task(ALICE, accepted.task.id)).status.state is CANCELED


async def test_claims_recorded_through_a_reach_the_claim_index_of_b(
    nodes: tuple[Node, Node], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = nodes
    sent = message("block:x", "m-claim")
    key = b.plane.admission.check(ALICE, sent).key
    gate = b.plane.intake.intake.admission
    await gate.load_claims(b.plane.store)  # B's index as loaded before the send
    assert not gate.may_be_claimed(key)
    noted = trio.Event()
    note = gate.claimed

    def claimed(seen: str) -> None:
        note(seen)
        if seen == key:
            noted.set()

    monkeypatch.setattr(gate, "claimed", claimed)
    await a.plane.send(ALICE, sent, ())
    with trio.fail_after(20):
        await noted.wait()  # by the doorbell: the polls are an hour apart
    assert gate.may_be_claimed(key)
    for node in (a, b):
        node.agent.open("x")


async def test_a_lost_doorbell_is_recovered_by_the_poll(
    pg_cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(doorbell, "ring", lambda conn, rings: None)  # every ring lost
    monkeypatch.setattr(events, "POLL_S", 0.2)
    url = pg_cluster.fresh_store_url()
    async with (
        open_node(url, tmp_path, "node-a", Agent(outputs_then_complete)) as a,
        open_node(url, tmp_path, "node-b", Agent(outputs_then_complete)) as b,
    ):
        accepted = await send(a.plane, "block:done", "m-1")
        runner, watcher = await runner_of(a, b)
        on_b = await watcher.plane.subscribe(ALICE, accepted.task.id)
        runner.agent.open("done")
        frames = frames_of(await collect(on_b))
    assert frames[0].startswith("task:") and frames[-1] == "status:TASK_STATE_COMPLETED"


def slots_taken(url: str) -> int:
    """Waiting slots of the shared bound taken now, read from the database."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM wake_slots WHERE activation_id IS NOT NULL"
        ).fetchone()
    assert row is not None
    return int(row[0])


async def test_a_stale_claim_index_costs_a_retryable_503_never_a_second_task(
    nodes: tuple[Node, Node], url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What B's claim index may cost while it lags (design rule "Idempotent intake"):
    a duplicate of A's send, judged certainly new while B's wake queue is full, is
    refused with a retryable 503 and records nothing; once B has room, the same send
    gets A's Task. Never a second Task."""
    a, b = nodes
    gate = b.plane.intake.intake.admission
    monkeypatch.setattr(gate, "claimed", lambda key: None)  # B's index never learns
    first = await send(a.plane, "block:a", "m-dup")
    assert first.task is not None
    filled: list[str] = []

    async def fill() -> None:
        sent = await send(b.plane, "block:b", f"m-fill-{len(filled)}")
        assert sent.task is not None
        filled.append(sent.task.id)

    # Both nodes' one turn slot taken by a blocked turn (no claim can free a slot
    # any more), then every waiting slot of the shared bound, as the database says.
    await fill()
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            for node in (a, b):
                nursery.start_soon(node.agent.wait_turns, 1)
    while await trio.to_thread.run_sync(slots_taken, url) < WAKE_QUEUE_SIZE:
        assert len(filled) <= WAKE_QUEUE_SIZE + 1
        await fill()
    with pytest.raises(Overloaded) as refused:
        await send(b.plane, "block:a", "m-dup")
    assert isinstance(refused.value, Transient)
    for node in (a, b):
        node.agent.open("b")
    for task_id in filled:
        settled = await b.plane.wait_settled(ALICE, task_id, 60)
        assert settled.status.state is COMPLETED
    again = await send(b.plane, "block:a", "m-dup")
    assert again.disposition == "duplicate" and again.task is not None
    assert again.task.id == first.task.id
    claims = [e for e in await b.plane.store.journal() if e.kind == "CLAIM"]
    assert len(claims) == len(filled) + 1  # the fill, and m-dup once
    for node in (a, b):
        node.agent.open("a")
