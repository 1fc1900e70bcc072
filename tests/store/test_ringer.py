"""The ringer (``taskplane.store.postgres.ringer``) on trio's mock clock, over a
session that records what it would send: the rings of the batches of one window are
one NOTIFY, a Task's newest version standing for the ones before it; and which
rings an acceptance asks for.

The ringer sends from a worker thread, during which every trio task is blocked; the
clock here jumps only after the run has been idle for a while of real time (not the
autojump clock's zero), so a ring in flight is never mistaken for idleness."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import outcome
import pytest
import trio
import trio.testing

from taskplane.model.enums import Role
from taskplane.model.lifecycle import new_task
from taskplane.model.types import Message, Part
from taskplane.scope import Scope
from taskplane.store.postgres.doorbell import CLAIMS, WAKE, rings_of, task_ring
from taskplane.store.postgres.ringer import MAX_PENDING, RING_GATHER_S, Ringer
from taskplane.store.records import Accepted, Fence, StoredTask


@pytest.fixture
def clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0.05)


class Recording:
    """A session's ``run_alone`` whose connection records each NOTIFY payload."""

    def __init__(self) -> None:
        self.payloads: list[tuple[float, str]] = []
        self.rang = trio.Event()

    def execute(self, sql: str, params: tuple[str, ...]) -> None:
        assert "pg_notify" in sql
        self.payloads.append((trio.from_thread.run_sync(trio.current_time), params[0]))
        trio.from_thread.run_sync(self.rang.set)

    def run_alone(self, op: Callable[[Any], Any]) -> outcome.Outcome[Any]:
        return outcome.capture(op, self)


async def test_the_rings_of_one_window_are_one_notify_with_each_tasks_newest_version(
    clock: trio.testing.MockClock,
) -> None:
    session = Recording()
    ringer = Ringer(session, "node-a")  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ringer.run)
        ringer.add(["c", "t:task-1:1", "w"])
        await trio.sleep(RING_GATHER_S / 5)
        ringer.add(["t:task-1:3", "c", "t:task-2:1"])
        ringer.add(["t:task-1:2"])  # an older batch's, heard late: still 3
        await trio.sleep(RING_GATHER_S * 2)
        ringer.add(["t:task-2:2"])  # the next window
        await trio.sleep(RING_GATHER_S * 2)
        nursery.cancel_scope.cancel()
    (t0, first), (t1, second) = session.payloads
    assert first.split() == ["n:node-a", "c", "w", "t:task-1:3", "t:task-2:1"]
    assert second.split() == ["n:node-a", "t:task-2:2"]
    assert t0 >= RING_GATHER_S and t1 - t0 >= RING_GATHER_S
    assert ringer.rung == 2


async def test_a_full_window_rings_at_once_and_a_flush_rings_what_is_left(
    clock: trio.testing.MockClock,
) -> None:
    session = Recording()
    ringer = Ringer(session, None)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ringer.run)
        start = trio.current_time()
        ringer.add(f"t:task-{n}:1" for n in range(MAX_PENDING))
        await session.rang.wait()
        assert session.payloads[0][0] == start  # no wait
        nursery.cancel_scope.cancel()
    rung = {t for _, p in session.payloads for t in p.split()}
    assert rung == {f"t:task-{n}:1" for n in range(MAX_PENDING)}
    ringer.add(["c"])
    await ringer.flush()
    assert session.payloads[-1][1] == "c"
    await ringer.flush()  # nothing gathered: nothing rung
    assert session.payloads[-1][1] == "c" and ringer.rung == len(session.payloads)


@pytest.mark.parametrize("claimed", [False, True], ids=["queued", "claimed-at-acceptance"])
def test_an_acceptance_rings_a_wake_only_when_its_wake_is_left_to_the_queue(claimed: bool) -> None:
    """A wake born running under the accepting node's lease is no other node's to
    claim, so its acceptance rings its claim and its Task's version, not a wake."""
    message = Message(message_id="m-1", role=Role.ROLE_USER, parts=(Part.from_text("hi"),))
    task = new_task("t-1", "c-1", message, 0)
    stored = StoredTask(task, Scope("", "alice"), "a2a", 1, 0)
    fence = Fence("a-1", 1, "node-1") if claimed else None
    accepted = Accepted("created", "a-1", stored, fence=fence)
    expected = [CLAIMS, task_ring("t-1", 1)] + ([] if claimed else [WAKE])
    assert list(rings_of(accepted)) == expected
