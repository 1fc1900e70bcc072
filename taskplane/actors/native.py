"""What a native source may ask of the plane besides intake and outbound: its
checkpoint, evidence about events it did not turn into work, and the results waiting
to be delivered. Sources never touch the store themselves (import layers).

Every method is one store operation; each is durable when it returns.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from taskplane.actors.plane import TaskPlane
from taskplane.store.records import Delivery as Delivery
from taskplane.store.records import EvidenceRecord
from taskplane.store.records import Recovery as Recovery
from taskplane.store.records import StoredTask as StoredTask
from taskplane.store.source_store import DeliveryRow as DeliveryRow
from taskplane.store.source_store import LeaseFence as LeaseFence
from taskplane.store.source_store import SourceStore as SourceStore


@attrs.define(eq=False)
class NativeServices:
    """Checkpoints, evidence and pending results over ``plane``'s stores."""

    plane: TaskPlane
    sources: SourceStore

    async def load_checkpoint(self, principal: str, source: str) -> object:
        """The checkpoint last saved for (``principal``, ``source``), or ``None``."""
        return await self.sources.load_checkpoint(principal, source)

    async def save_checkpoint(
        self, principal: str, source: str, value: object, *, fence: LeaseFence | None = None
    ) -> None:
        """Durably replace the checkpoint (JSON-serialisable ``value``); with ``fence``,
        only while that leader lease is current.

        Raises:
            Fenced: the lease moved or expired; nothing was recorded.
        """
        await self.sources.save_checkpoint(principal, source, value, fence=fence)

    async def record_evidence(
        self, record_type: str, record: dict[str, object], *, task_id: str | None = None
    ) -> None:
        """Durably append one evidence record (e.g. ``source.evidence``)."""
        entry = EvidenceRecord(record_type, record, task_id=task_id)
        await self.plane.store.append([entry], self.plane.now_ms())

    async def results_to_deliver(
        self, sources: Sequence[str], reply_prefix: str, updated_since_ms: int
    ) -> tuple[StoredTask, ...]:
        """Native Tasks with a result not yet delivered (see ``SourceStore``)."""
        return await self.sources.results_to_deliver(sources, reply_prefix, updated_since_ms)

    async def find_task(self, task_id: str) -> StoredTask | None:
        """The native Task ``task_id`` with its scope and source, or ``None``."""
        return await self.plane.store.find_task(task_id)

    async def list_deliveries(self, state: str | None = None) -> tuple[DeliveryRow, ...]:
        """Every outbound delivery, or those in ``state``."""
        return await self.sources.list_deliveries(state)
