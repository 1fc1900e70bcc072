"""One started source as a native Task's channel tools reach it
(:class:`~taskplane.actors.channels.NativeChannel`).

``channel_read`` returns the provider item the Task came from as the source recorded it
(the newest provider message in the Task's history, with its ``nativeLocator``).
``channel_publish`` posts through the source's own :meth:`Source.sender`, to the same
exact item a reply goes to, as the delivery of operation ``publish:<operation ID>``
with payload policy ``fixed`` (the operation ID alone names it: a retried call is the
same delivery, reusing it with other text is a conflict), through the per-delivery
serializer, so a crash leaving it ``sending`` is reconciled by the source's recovery
mode when the agent calls again.
"""

from __future__ import annotations

import hashlib

import attrs

from taskplane.actors.channels import ChannelItem, Published
from taskplane.actors.native import Delivery, NativeServices
from taskplane.actors.plane import TaskPlane
from taskplane.errors import TaskNotFound, ToolError
from taskplane.model.enums import Role
from taskplane.model.types import Task
from taskplane.sources.base import NATIVE_LOCATOR, Result, Source
from taskplane.sources.delivery import locator_of

PUBLISH_PREFIX = "publish:"


@attrs.define(eq=False)
class SourceChannel:
    """The channel of ``source``; see the module docstring."""

    plane: TaskPlane
    services: NativeServices
    source: Source

    async def read(self, task: Task) -> ChannelItem:
        """The newest provider item in ``task``'s history.

        Raises:
            ToolError: the history holds no provider item.
        """
        for message in reversed(task.history):
            meta = message.parts[0].metadata if message.parts else None
            if message.role is Role.ROLE_USER and meta and NATIVE_LOCATOR in meta:
                return ChannelItem(self.source.name, locator_of(task), message.parts)
        raise ToolError(f"task {task.id} holds no {self.source.name} item")

    async def publish(self, task: Task, operation_id: str, text: str) -> Published:
        """``text`` to the item ``task`` came from, once per ``operation_id``.

        Raises:
            TaskNotFound: the Task is gone.
            DeliveryFailed, DeliveryAmbiguous, DeliveryConflict, StoreUnavailable.
        """
        stored = await self.services.find_task(task.id)
        if stored is None:
            raise TaskNotFound(f"task {task.id} not found")
        digest = hashlib.sha256(text.encode()).hexdigest()
        delivery = Delivery(
            task.id,
            self.source.name,
            PUBLISH_PREFIX + operation_id,
            digest,
            self.source.recovery,
            payload_policy="fixed",
        )
        result = Result(stored.task, stored.scope, text, locator_of(stored.task), delivery)
        sender = self.source.sender(result)
        response = await self.plane.outbound.deliver(delivery, sender.send, sender.reconcile)
        return Published(delivery.delivery_id, response)
