"""The source store facade: every :class:`~taskplane.store.source_store.SourceStore`
operation turned into one op on the store actor's inbox (shared with the task
store), once for every backend. A backend supplies a :class:`SourceRecorder`, the
blocking functions of its connection.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar

import trio

from taskplane.store.records import StoredTask
from taskplane.store.requests import StoreRequest, submit
from taskplane.store.source_store import DeliveryRow, LeaseFence

C = TypeVar("C")
C_contra = TypeVar("C_contra", contravariant=True)


class SourceRecorder(Protocol[C_contra]):
    """What a backend's source store runs, over connection ``C``; each has the shape
    and errors of the :class:`~taskplane.store.source_store.SourceStore` operation of
    the same name (a checkpoint is saved as its JSON text)."""

    def load_checkpoint(self, conn: C_contra, principal: str, source: str) -> object: ...

    def save_checkpoint(
        self, conn: C_contra, principal: str, source: str, data: str, fence: LeaseFence | None
    ) -> None: ...

    def results_to_deliver(
        self, conn: C_contra, sources: Sequence[str], reply_prefix: str, since_ms: int
    ) -> tuple[StoredTask, ...]: ...

    def list_deliveries(self, conn: C_contra, state: str | None) -> tuple[DeliveryRow, ...]: ...

    def resolve_delivery(
        self, conn: C_contra, delivery_id: str, now_ms: int, delivered_as: str | None
    ) -> DeliveryRow: ...


class SourceStoreFacade(Generic[C]):
    """The source store over the store actor's inbox (shared with the task store).

    Args:
        inbox: the send end of the backend's store actor inbox.
        recorder: the backend's :class:`SourceRecorder`.
    """

    def __init__(
        self, inbox: trio.MemorySendChannel[StoreRequest], recorder: SourceRecorder[C]
    ) -> None:
        self._inbox = inbox
        self._rec = recorder

    async def load_checkpoint(self, principal: str, source: str) -> object:
        """See :meth:`SourceStore.load_checkpoint`."""
        rec = self._rec
        return await submit(self._inbox, lambda conn: rec.load_checkpoint(conn, principal, source))

    async def save_checkpoint(
        self, principal: str, source: str, value: object, *, fence: LeaseFence | None = None
    ) -> None:
        """See :meth:`SourceStore.save_checkpoint`."""
        data = json.dumps(value, sort_keys=True)
        rec = self._rec
        await submit(
            self._inbox, lambda conn: rec.save_checkpoint(conn, principal, source, data, fence)
        )

    async def results_to_deliver(
        self, sources: Sequence[str], reply_prefix: str, updated_since_ms: int
    ) -> tuple[StoredTask, ...]:
        """See :meth:`SourceStore.results_to_deliver`."""
        names = tuple(sources)
        rec = self._rec
        return await submit(
            self._inbox,
            lambda conn: rec.results_to_deliver(conn, names, reply_prefix, updated_since_ms),
        )

    async def list_deliveries(self, state: str | None = None) -> tuple[DeliveryRow, ...]:
        """See :meth:`SourceStore.list_deliveries`."""
        rec = self._rec
        return await submit(self._inbox, lambda conn: rec.list_deliveries(conn, state))

    async def resolve_delivery(
        self, delivery_id: str, now_ms: int, *, delivered_as: str | None
    ) -> DeliveryRow:
        """See :meth:`SourceStore.resolve_delivery`."""
        rec = self._rec
        return await submit(
            self._inbox, lambda conn: rec.resolve_delivery(conn, delivery_id, now_ms, delivered_as)
        )
