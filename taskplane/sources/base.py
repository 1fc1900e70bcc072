"""The source interface: what a native source implements and what the runtime gives it.

A source turns provider items into :class:`Event` values and hands them to
:meth:`SourceContext.ingest`; it acknowledges the provider or advances its checkpoint
only after that returns (design document, "A source may advance its checkpoint or
acknowledge the provider only after acceptance"). For each result the runtime asks
:meth:`Source.sender` how to deliver it, and performs the delivery through the
per-delivery serializer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import attrs
import trio

from taskplane.actors.native import Delivery, Recovery
from taskplane.actors.outbound import Reconcile, Send
from taskplane.model.enums import TaskState
from taskplane.model.types import Part, Task
from taskplane.scope import Scope

NATIVE_LOCATOR = "nativeLocator"
"""Metadata key, on the first Part of an ingested Message, of the unhashed provider
values that name the exact item (used to deliver the result back to it)."""


@attrs.frozen
class Event:
    """One provider item that is work.

    Attributes:
        principal: the provider identity the Task belongs to (an identifier).
        identity: the raw event identity fields (hashed into the dedupe key).
        conversation: the raw conversation fields (hashed into the conversation key),
            or ``()`` for a fresh context each time.
        parts: what the agent reads.
        locator: unhashed provider values naming the exact item (strings).
        reply_to: the provider response this item directly replies to, if the
            provider says so (reply anchors).
    """

    principal: str
    identity: tuple[str, ...]
    conversation: tuple[str, ...]
    parts: tuple[Part, ...]
    locator: Mapping[str, str]
    reply_to: str | None = None


@attrs.frozen
class Result:
    """A native Task's result, ready to deliver.

    Attributes:
        task: the Task (settled, or asking for input).
        scope: its owner.
        text: the reply text (the response artifact, or the status message).
        locator: the native locator of the item the result answers (the newest
            provider item in the Task's history).
        delivery: the delivery record's identity (its ``delivery_id`` is stable).
    """

    task: Task
    scope: Scope
    text: str
    locator: Mapping[str, str]
    delivery: Delivery

    @property
    def state(self) -> TaskState:
        """The Task's state (COMPLETED, REJECTED or INPUT_REQUIRED)."""
        return self.task.status.state


@attrs.frozen
class Sender:
    """How one result is delivered.

    Attributes:
        send: the provider mutation; returns the provider's response ID.
        reconcile: for ``lookup`` recovery, finds a sent response again.
        anchor: the response ID, when the source supports reply anchors and knows it
            before sending (it is recorded first, so a crash cannot lose it).
    """

    send: Send
    reconcile: Reconcile | None = None
    anchor: str | None = None


class SourceContext(Protocol):
    """The plane as a source sees it (see :class:`taskplane.sources.runtime.Context`)."""

    async def ingest(self, event: Event) -> str:
        """Accept ``event``; return its Task ID. Raises the intake errors
        (``Overloaded``: not recorded, retry later)."""
        ...

    async def evidence(self, classification: str, record: dict[str, object]) -> None:
        """Durably record a ``source.evidence`` record (non-work, malformed)."""
        ...

    async def deliver(
        self,
        task_id: str,
        operation_id: str,
        payload: str,
        send: Send,
        *,
        recovery: Recovery = "idempotent",
        reconcile: Reconcile | None = None,
    ) -> str:
        """One provider mutation for ``task_id`` (an acknowledgement) at most once."""
        ...

    async def load_checkpoint(self, principal: str) -> object:
        """This source's checkpoint for ``principal`` (JSON), or ``None``."""
        ...

    async def save_checkpoint(self, principal: str, value: object) -> None:
        """Durably replace this source's checkpoint for ``principal``."""
        ...


async def load_state(ctx: SourceContext, principal: str) -> dict[str, Any]:
    """``ctx``'s checkpoint for ``principal`` as a JSON object (a copy); ``{}`` when
    there is none or it is not an object."""
    value = await ctx.load_checkpoint(principal)
    return dict(value) if isinstance(value, dict) else {}


class Source(Protocol):
    """A native source.

    Attributes:
        name: the ``OUTFITTER_CHANNELS`` name, also the store's source name.
        recovery: how its reply delivery recovers after a crash.
        supports_anchors: its provider has a per-message reply relation.
    """

    name: str
    recovery: Recovery
    supports_anchors: bool

    async def run(
        self, ctx: SourceContext, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Connect (raise on a configuration or provider error before
        ``task_status.started()``), then take events until cancelled. Cancelling stops
        it; an item not yet acknowledged is offered again next time."""
        ...

    def sender(self, result: Result) -> Sender:
        """How to deliver ``result`` to the exact provider item it answers."""
        ...
