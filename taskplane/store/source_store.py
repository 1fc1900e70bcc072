"""The source store contract: what native sources keep beside the task store.

Per-source checkpoints (design document, "A source may advance its checkpoint or
acknowledge the provider only after acceptance"), the native results still waiting
for delivery, and the operator's view of outbound deliveries. The same rules as
:mod:`taskplane.store.contract` hold: each operation is atomic, answered after its
commit, may share a transaction with others, and may also raise ``StoreUnavailable``
or ``ActorGone``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs

from taskplane.store.records import StoredTask

RESULT_STATES = (
    "TASK_STATE_COMPLETED",
    "TASK_STATE_REJECTED",
    "TASK_STATE_INPUT_REQUIRED",
    "TASK_STATE_AUTH_REQUIRED",
)
"""States whose result a native source delivers (settled, or asking)."""


@attrs.frozen
class DeliveryRow:
    """One delivery as the operator sees it (times in ms since the epoch)."""

    delivery_id: str
    task_id: str
    source: str
    operation_id: str
    recovery: str
    state: str
    provider_response_id: str | None
    error: str | None
    updated_at_ms: int


@attrs.frozen
class LeaseFence:
    """The leader lease a source's checkpoint writes are fenced by (a store shared by
    several nodes only; design rule "Leader work runs under a lease").

    Attributes:
        name: the lease (``source:<name>``).
        node_id: the node that holds it.
        epoch: the term it holds it at (a later holder's epoch is higher).
    """

    name: str
    node_id: str
    epoch: int


class SourceStore(Protocol):
    """Checkpoints, pending results and the operator's delivery records."""

    async def load_checkpoint(self, principal: str, source: str) -> object:
        """The checkpoint of ``source`` for ``principal`` (decoded JSON), or ``None``."""
        ...

    async def save_checkpoint(
        self, principal: str, source: str, value: object, *, fence: LeaseFence | None = None
    ) -> None:
        """Replace the checkpoint of ``source`` for ``principal`` with ``value`` (JSON).

        With ``fence`` (a shared store), the write commits only while that lease is
        current, checked in the same transaction.

        Raises:
            Fenced: the lease moved or expired; nothing was recorded.
        """
        ...

    async def results_to_deliver(
        self, sources: Sequence[str], reply_prefix: str, updated_since_ms: int
    ) -> tuple[StoredTask, ...]:
        """Native Tasks of ``sources`` in a :data:`RESULT_STATES` state written at or
        after ``updated_since_ms``, whose reply (operation ``<reply_prefix><status
        message ID>``, or ``<reply_prefix><state>`` without a status message) has no
        ``delivered`` or ``ambiguous`` delivery; oldest change first, at most 256."""
        ...

    async def list_deliveries(self, state: str | None = None) -> tuple[DeliveryRow, ...]:
        """Every delivery (or those in ``state``), newest change first."""
        ...

    async def resolve_delivery(
        self, delivery_id: str, now_ms: int, *, delivered_as: str | None
    ) -> DeliveryRow:
        """Resolve an ``ambiguous`` delivery by hand: ``delivered_as`` (the response ID
        the operator found) records it ``delivered``; ``None`` records it ``failed``,
        so it is sent again.

        Raises:
            InvalidRequest: no such delivery, or it is not ``ambiguous``.
        """
        ...
