"""Outbound delivery, serialized per delivery ID (design rule "Outbound delivery
is serialized per delivery ID").

One serializer task per delivery ID, started on demand and gone when its inbox is
empty: concurrent identical responses queue behind each other, so they share one
durable state transition and one provider mutation (the second finds ``delivered``
and gets the stored provider response ID). A ``sending`` record left by a crash is
reconciled by its recovery mode: ``idempotent`` sends again, ``lookup`` asks its
reconciler, and a ``lookup`` without a reconciler (or ``ambiguous``) fails closed as
``ambiguous`` with unhealthy evidence instead of sending blindly.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import attrs
import trio

from taskplane.errors import Overloaded, Refused, TaskplaneError, Transient
from taskplane.mailbox import ReplyTo, answer, ask, handling
from taskplane.store.contract import TaskStore
from taskplane.store.records import Delivery, DeliveryState, EvidenceRecord

log = logging.getLogger("taskplane.actors.outbound")

SERIALIZER_INBOX_SIZE = 64

Send = Callable[[], Awaitable[str]]
"""Performs the provider mutation; returns the provider's response ID.
Raises :class:`ProviderRejected` for a determinate refusal, anything else when the
outcome is unknown."""

Reconcile = Callable[[], Awaitable[str | None]]
"""Looks the delivery up at the provider: its response ID, or ``None`` if not sent."""


class ProviderRejected(Exception):
    """The provider definitely refused the mutation (e.g. HTTP 4xx): safe to retry later."""


class DeliveryFailed(Transient):
    """The delivery did not happen; it may be retried (state ``failed`` or ``sending``)."""


class DeliveryAmbiguous(TaskplaneError):
    """The outcome is unknown and cannot be checked: never sent again automatically."""


class DeliveryConflict(Refused):
    """A ``fixed`` operation ID was reused with other content."""


@attrs.frozen(eq=False)
class Deliver:
    """A serializer's one message: perform ``delivery`` at most once; reply with the
    provider response ID."""

    delivery: Delivery
    send: Send
    reconcile: Reconcile | None
    reply: ReplyTo[str]


@attrs.define
class _Serializer:
    tx: trio.MemorySendChannel[Deliver]


class Outbound:
    """Per-delivery serializers over the store.

    Args:
        nursery: where serializer tasks run.
        store: the task store.
        now_ms: wall clock in ms.
    """

    def __init__(self, nursery: trio.Nursery, store: TaskStore, now_ms: Callable[[], int]) -> None:
        self._nursery = nursery
        self._store = store
        self._now_ms = now_ms
        self._serializers: dict[str, _Serializer] = {}

    def __len__(self) -> int:
        """Serializer tasks alive now."""
        return len(self._serializers)

    async def deliver(
        self, delivery: Delivery, send: Send, reconcile: Reconcile | None = None
    ) -> str:
        """Perform ``delivery`` at most once; return the provider response ID.

        Raises:
            DeliveryFailed: not delivered; retryable.
            DeliveryAmbiguous: outcome unknown; recorded, never retried automatically.
            DeliveryConflict: a ``fixed`` operation ID reused with other content.
            StoreUnavailable: a state change could not be recorded.
            Overloaded: ``SERIALIZER_INBOX_SIZE`` callers already wait for this ID.
        Cancellation: once queued the delivery still runs; only the answer is lost.
        """
        key = delivery.delivery_id

        def post(message: Deliver) -> None:
            serializer = self._serializers.get(key)
            if serializer is None:
                tx, rx = trio.open_memory_channel[Deliver](SERIALIZER_INBOX_SIZE)
                serializer = self._serializers[key] = _Serializer(tx)
                self._nursery.start_soon(self._serve, key, serializer, rx)
            try:
                serializer.tx.send_nowait(message)
            except trio.WouldBlock:
                raise Overloaded(f"delivery {key} has too many callers waiting") from None

        return await ask(
            post,
            lambda reply: Deliver(delivery, send, reconcile, reply),
            f"the serializer of {key}",
        )

    async def _serve(
        self, key: str, serializer: _Serializer, rx: trio.MemoryReceiveChannel[Deliver]
    ) -> None:
        async with rx:
            while True:
                try:
                    message = rx.receive_nowait()
                except trio.WouldBlock:
                    # Nothing waits: retire (synchronously, so no request can slip in).
                    del self._serializers[key]
                    serializer.tx.close()
                    return
                with handling(message):
                    work = self._deliver(message.delivery, message.send, message.reconcile)
                    await answer(message.reply, work)

    async def _save(
        self,
        delivery: Delivery,
        state: DeliveryState,
        *,
        response_id: str | None = None,
        error: str | None = None,
    ) -> None:
        await self._store.save_delivery(
            delivery, state, self._now_ms(), response_id=response_id, error=error
        )

    async def _deliver(self, delivery: Delivery, send: Send, reconcile: Reconcile | None) -> str:
        key = delivery.delivery_id
        record = await self._store.load_delivery(key)
        if record is not None and record.payload_digest != delivery.payload_digest:
            raise DeliveryConflict(
                f"operation {delivery.operation_id} was already used with other content"
            )
        if record is not None and record.state == "delivered":
            assert record.provider_response_id is not None
            return record.provider_response_id
        if record is not None and record.state == "ambiguous":
            log.error(
                "delivery %s is ambiguous",
                key,
                extra={"event": "channels_unhealthy", "deliveryId": key},
            )
            raise DeliveryAmbiguous(f"delivery {key} has an unknown outcome; reconcile it by hand")
        if record is not None and record.state == "sending":
            if delivery.recovery == "lookup" and reconcile is not None:
                found = await reconcile()
                if found is not None:
                    await self._save(delivery, "delivered", response_id=found)
                    return found
            elif delivery.recovery != "idempotent":
                await self._fail_closed(
                    delivery, "a crash left it sending and it cannot be looked up"
                )
        await self._save(delivery, "sending")
        try:
            response_id = await send()
        except ProviderRejected as exc:
            await self._save(delivery, "failed", error=str(exc))
            raise DeliveryFailed(f"the provider refused delivery {key}: {exc}") from exc
        except Exception as exc:
            if delivery.recovery == "lookup":
                raise DeliveryFailed(
                    f"delivery {key} outcome unknown; it will be looked up before any retry"
                ) from exc
            if delivery.recovery == "ambiguous":
                await self._fail_closed(delivery, f"outcome unknown: {exc!r}")
            await self._save(delivery, "failed", error=repr(exc))
            raise DeliveryFailed(f"delivery {key} failed: {exc!r}") from exc
        await self._save(delivery, "delivered", response_id=response_id)
        return response_id

    async def _fail_closed(self, delivery: Delivery, why: str) -> None:
        key = delivery.delivery_id
        unhealthy = EvidenceRecord(
            "activation.unhealthy",
            {
                "deliveryId": key,
                "taskId": delivery.task_id,
                "source": delivery.source,
                "error": why,
            },
            task_id=delivery.task_id,
        )
        await self._store.save_delivery(
            delivery, "ambiguous", self._now_ms(), error=why, records=(unhealthy,)
        )
        log.error(
            "delivery %s is ambiguous: %s",
            key,
            why,
            extra={"event": "channels_unhealthy", "deliveryId": key},
        )
        raise DeliveryAmbiguous(f"delivery {key}: {why}; it is never sent again automatically")
