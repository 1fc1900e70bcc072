"""What a native source may ask of the plane besides intake and outbound: its
checkpoint, evidence about events it did not turn into work, and the results waiting
to be delivered. Sources never touch the store themselves (import layers).

Every method is one store op; each is durable when it returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from taskplane.actors.plane import TaskPlane
from taskplane.store import checkpoints, outbox
from taskplane.store.acceptance import record_evidence
from taskplane.store.deliveries import Delivery as Delivery
from taskplane.store.deliveries import Recovery as Recovery
from taskplane.store.outbox import DeliveryRow as DeliveryRow
from taskplane.store.tasks import StoredTask as StoredTask


@attrs.define(eq=False)
class NativeServices:
    """Checkpoints, evidence and pending results over ``plane``'s store."""

    plane: TaskPlane

    async def load_checkpoint(self, principal: str, source: str) -> Any:
        """The checkpoint last saved for (``principal``, ``source``), or ``None``."""
        return await self.plane.store.call(lambda conn: checkpoints.load(conn, principal, source))

    async def save_checkpoint(self, principal: str, source: str, value: Any) -> None:
        """Durably replace the checkpoint (JSON-serialisable ``value``)."""
        await self.plane.store.call(lambda conn: checkpoints.save(conn, principal, source, value))

    async def record_evidence(
        self, record_type: str, record: dict[str, object], *, task_id: str | None = None
    ) -> None:
        """Durably append one evidence record (e.g. ``source.evidence``)."""
        now = self.plane.now_ms()
        await self.plane.store.call(
            lambda conn: record_evidence(conn, record_type, record, now, task_id=task_id)
        )

    async def results_to_deliver(
        self, sources: Sequence[str], reply_prefix: str, updated_since_ms: int
    ) -> list[StoredTask]:
        """Native Tasks with a result not yet delivered (see :mod:`taskplane.store.outbox`)."""
        names = tuple(sources)
        return await self.plane.store.call(
            lambda conn: outbox.results_to_deliver(conn, names, reply_prefix, updated_since_ms)
        )

    async def list_deliveries(self, state: str | None = None) -> list[DeliveryRow]:
        """Every outbound delivery, or those in ``state``."""
        return await self.plane.store.call(lambda conn: outbox.list_deliveries(conn, state))
