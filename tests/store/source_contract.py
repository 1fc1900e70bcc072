"""The source store contract suite: checkpoints, the results still to deliver, and
the operator's delivery records, beside a task store on the same database.

:class:`SourceStoreContract` is not collected by itself: a backend's test module
subclasses it and implements :meth:`SourceStoreContract.open_stores` (see
``test_source_store_sqlite.py``). The tests use only the two contracts.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest

from taskplane.errors import InvalidRequest
from taskplane.store.contract import TaskStore
from taskplane.store.records import Delivery, StoredTask, TaskChange
from taskplane.store.source_store import SourceStore
from tests.store.contract import (
    COMPLETED,
    LOCATOR,
    NOW,
    WORKING,
    activation,
    asking,
    moved,
    stored_of,
)

Stores = AbstractAsyncContextManager[tuple[TaskStore, SourceStore]]


async def native_task(store: TaskStore, key: str, source: str = "relay") -> StoredTask:
    return stored_of(await store.accept(activation(key, source=source), LOCATOR, NOW))


def reply_of(stored: StoredTask) -> Delivery:
    status = stored.task.status
    op = status.message.message_id if status.message else status.state.name
    return Delivery(stored.task.id, stored.source, "reply:" + op, "digest", "lookup")


class SourceStoreContract:
    """The source store tests. Subclasses implement :meth:`open_stores`."""

    def open_stores(self, tmp_path: Path) -> Stores:
        """A running, empty task store and the source store beside it (closed on exit)."""
        raise NotImplementedError

    async def test_checkpoints_are_per_principal_and_source(self, tmp_path: Path) -> None:
        async with self.open_stores(tmp_path) as (_, sources):
            assert await sources.load_checkpoint("p", "relay") is None
            await sources.save_checkpoint("p", "relay", {"cursor": 1})
            await sources.save_checkpoint("p", "github", {"cursor": 2})
            await sources.save_checkpoint("p", "relay", {"cursor": 3})
            assert await sources.load_checkpoint("p", "relay") == {"cursor": 3}
            assert await sources.load_checkpoint("p", "github") == {"cursor": 2}
            assert await sources.load_checkpoint("q", "relay") is None

    async def test_results_to_deliver_lists_settled_native_tasks_until_delivered(
        self, tmp_path: Path
    ) -> None:
        async with self.open_stores(tmp_path) as (store, sources):
            working = await native_task(store, "k-1")
            await store.apply(TaskChange(working, moved(working.task, WORKING, NOW + 1), NOW + 1))
            done = await native_task(store, "k-2")
            done = await store.apply(
                TaskChange(done, moved(done.task, COMPLETED, NOW + 2), NOW + 2)
            )
            asks = await native_task(store, "k-3")
            asks = await store.apply(TaskChange(asks, asking(asks.task, NOW + 3), NOW + 3))
            other = await native_task(store, "k-4", source="a2a")
            await store.apply(TaskChange(other, moved(other.task, COMPLETED, NOW + 4), NOW + 4))

            pending = await sources.results_to_deliver(["relay"], "reply:", 0)
            assert [s.task.id for s in pending] == [done.task.id, asks.task.id]
            since = await sources.results_to_deliver(["relay"], "reply:", NOW + 3)
            assert [s.task.id for s in since] == [asks.task.id]  # written at or after NOW + 3
            assert await sources.results_to_deliver(["relay"], "reply:", NOW + 4) == ()

            await store.save_delivery(reply_of(done), "failed", NOW + 5)  # still pending
            await store.save_delivery(reply_of(asks), "delivered", NOW + 5, response_id="r-1")
            pending = await sources.results_to_deliver(["relay"], "reply:", 0)
            assert [s.task.id for s in pending] == [done.task.id]
            await store.save_delivery(reply_of(done), "ambiguous", NOW + 6)
            assert await sources.results_to_deliver(["relay"], "reply:", 0) == ()
            assert await sources.results_to_deliver([], "reply:", 0) == ()

    async def test_only_an_ambiguous_delivery_can_be_resolved(self, tmp_path: Path) -> None:
        async with self.open_stores(tmp_path) as (store, sources):
            stored = await native_task(store, "k-1")
            found = Delivery(stored.task.id, "relay", "reply:a", "d", "ambiguous")
            again = Delivery(stored.task.id, "relay", "reply:b", "d", "ambiguous")
            done = Delivery(stored.task.id, "relay", "reply:c", "d", "lookup")
            for delivery in (found, again):
                await store.save_delivery(delivery, "ambiguous", NOW)
            await store.save_delivery(done, "delivered", NOW, response_id="r-0")

            row = await sources.resolve_delivery(found.delivery_id, NOW + 1, delivered_as="r-1")
            assert (row.state, row.provider_response_id) == ("delivered", "r-1")
            row = await sources.resolve_delivery(again.delivery_id, NOW + 1, delivered_as=None)
            assert (row.state, row.provider_response_id) == ("failed", None)
            with pytest.raises(InvalidRequest, match="not ambiguous"):
                await sources.resolve_delivery(done.delivery_id, NOW + 1, delivered_as=None)
            with pytest.raises(InvalidRequest, match="does not exist"):
                await sources.resolve_delivery("delivery-nope", NOW + 1, delivered_as=None)
            listed = await sources.list_deliveries()
            assert {r.delivery_id: r.state for r in listed} == {
                found.delivery_id: "delivered",
                again.delivery_id: "failed",
                done.delivery_id: "delivered",
            }
            assert [r.delivery_id for r in await sources.list_deliveries("failed")] == [
                again.delivery_id
            ]
