"""Store round trips of the turn pipeline, in virtual time.

Issue "Performance", item "Turn pipeline": a new Task's owner starts from the
snapshot its creating commit returned, a new activation's first delivery needs no
journal read, and a blocking send takes the settled Task from owner(T)'s snapshots,
so a Task answered in one turn costs three store operations (the acceptance, the
grant, the completion), blocking or not. Re-deliveries and replays still read the
journal: the durable delivery count decides the delivery cap.
"""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

from taskplane.actors.plane import TaskPlane
from taskplane.model.enums import TaskState
from tests.support.agent import Agent
from tests.support.plane import open_test_plane
from tests.support.virtual import ALICE, COMPLETED, journal, options, send, task_id_of

FAILED = TaskState.TASK_STATE_FAILED


async def _deliveries(plane: TaskPlane, task_id: str) -> tuple[int, list[int]]:
    """(WOKEN records, the WAKE_DELIVERED delivery numbers) of ``task_id``."""
    entries = await journal(plane, task_id=task_id)
    woken = sum(1 for kind, _, _ in entries if kind == "WOKEN")
    return woken, [fields["delivery"] for kind, _, fields in entries if kind == "WAKE_DELIVERED"]


async def test_a_blocking_send_answered_in_one_turn_costs_three_store_operations(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    agent = Agent()
    async with open_test_plane(store_root, options(agent)) as plane:
        await trio.testing.wait_all_tasks_blocked()  # startup's own store work is done
        before = plane.store.statistics().operations
        task_id = task_id_of(await send(plane, "hello", "m-1"))
        with trio.fail_after(60):
            task = await plane.wait_settled(ALICE, task_id, 0)
        await trio.testing.wait_all_tasks_blocked()
        assert task.status.state is COMPLETED
        assert plane.store.statistics().operations - before == 3
        assert await _deliveries(plane, task_id) == (1, [1])
        stored = await plane.store.find_task(task_id)
        assert stored is not None and stored.task == task  # what the caller got is durable


async def test_redeliveries_read_the_durable_delivery_count_up_to_the_cap(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    agent = Agent()
    async with open_test_plane(store_root, options(agent)) as plane:
        task_id = task_id_of(await send(plane, "idle", "m-1"))
        with trio.fail_after(60):
            task = await plane.wait_settled(ALICE, task_id, 0)
        assert task.status.state is FAILED
        assert await _deliveries(plane, task_id) == (1, [1, 2, 3, 4, 5])
        assert len(agent.of(task_id)) == 5
