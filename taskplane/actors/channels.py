"""The native sources as a Task's channel tools reach them (design document,
"Task-authorized channel tools").

A native Task's turn is offered ``channel_read`` and ``channel_publish`` beside the four
``a2a_*`` tools. The toolbox checks the turn's authority, then asks the
:class:`NativeChannel` of the Task's source: the sources side implements it
(``taskplane.sources.channel``) and registers one per started source in the plane's
:class:`Channels`. An A2A Task, or one whose source is not running, has none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import attrs

from taskplane.model.types import Part, Task


@attrs.frozen
class ChannelItem:
    """The exact provider item a native Task came from.

    Attributes:
        source: the source's name (``OUTFITTER_CHANNELS`` name).
        locator: the unhashed provider values naming the item (``nativeLocator``).
        parts: the item as the source recorded it in the Task's history.
    """

    source: str
    locator: Mapping[str, str]
    parts: tuple[Part, ...]


@attrs.frozen
class Published:
    """One ``channel_publish`` delivery: its delivery ID and the provider's response ID."""

    delivery_id: str
    provider_response_id: str


class NativeChannel(Protocol):
    """One running source as the channel tools see it."""

    async def read(self, task: Task) -> ChannelItem:
        """The provider item ``task`` came from (the newest one in its history).

        Raises:
            ToolError: the Task's history holds no provider item.
        """
        ...

    async def publish(self, task: Task, operation_id: str, text: str) -> Published:
        """Post ``text`` to the item ``task`` came from, once per ``operation_id``
        (operation ``publish:<operation_id>``, payload policy ``fixed``, through the
        per-delivery serializer: rule "Outbound delivery is serialized per delivery ID").

        Raises:
            DeliveryFailed, DeliveryAmbiguous, DeliveryConflict, StoreUnavailable.
        """
        ...


class Channels:
    """The plane's native channels by source name, filled as each source starts."""

    def __init__(self) -> None:
        self._by_source: dict[str, NativeChannel] = {}

    def register(self, source: str, channel: NativeChannel) -> None:
        """``source`` started: its Tasks' turns get ``channel``."""
        self._by_source[source] = channel

    def get(self, source: str) -> NativeChannel | None:
        """The channel of ``source``, or ``None`` (A2A, or not started)."""
        return self._by_source.get(source)
