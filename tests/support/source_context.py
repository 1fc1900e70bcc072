"""A recording stand-in for the plane as a native source sees it (the
:class:`~taskplane.sources.base.SourceContext` protocol), for a source's unit tests.

It accepts every event (unless a refusal is queued), keeps one checkpoint for any
principal, records evidence by classification and expects no acknowledgement: a test
whose source acknowledges subclasses it and says how."""

from __future__ import annotations

import attrs
import trio

from taskplane.sources.base import Event


@attrs.define
class RecordingContext:
    """``refuse`` are raised by the next ingests, one each, before any is accepted;
    ``events`` are the accepted ``(trio.current_time(), event)`` pairs, each made Task
    ``"task-1"``; ``evidence_kinds`` the classifications of the evidence written;
    ``checkpoint`` the last one saved (``None`` before any)."""

    refuse: list[Exception] = attrs.field(factory=list)
    events: list[tuple[float, Event]] = attrs.field(factory=list)
    evidence_kinds: list[str] = attrs.field(factory=list)
    checkpoint: object = None

    async def ingest(self, event: Event) -> str:
        if self.refuse:
            raise self.refuse.pop(0)
        self.events.append((trio.current_time(), event))
        return "task-1"

    async def evidence(self, classification: str, record: dict[str, object]) -> None:
        self.evidence_kinds.append(classification)

    async def deliver(self, *args: object, **kw: object) -> str:
        raise AssertionError("this source acknowledges nothing")

    async def load_checkpoint(self, principal: str) -> object:
        return self.checkpoint

    async def save_checkpoint(self, principal: str, value: object) -> None:
        self.checkpoint = value
