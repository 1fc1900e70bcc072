"""Agent relay over a filesystem spool (conformance matrix, "Agent relay" row).

Inbox ``RELAY_SPOOL_DIR``: one JSON file per event, ``{"from", "conversationId",
"messageId", "parts" | "text", "replyTo"?}``. Files are taken in name order; names
starting with ``.`` or not ending in ``.json`` are ignored (writers create a hidden
temporary file and rename it). A file is removed only after its event was accepted
(a duplicate counts: it was accepted before). A malformed file, or one whose
``messageId`` was already used with another payload (a permanent outcome), is moved
to ``RELAY_SPOOL_DIR/malformed/`` after ``source.evidence`` is recorded: never lost.

Outbox ``RELAY_OUTBOX_DIR``: one reply file per delivery, ``<responseId>.json``,
written atomically (hidden temporary file, fsync, link to the final name, fsync of
the directory). The response ID is derived from the delivery ID, so it is stable:
sending again after a crash finds the file already there and writes nothing
(recovery ``idempotent``). A reply that asks for input is a reply anchor: an inbox
event whose ``replyTo`` names its response ID continues the waiting Task.

Receipts (``RELAY_RECEIPTS_DIR``, optional): each message's durable state, one file
``receipt-<h(from, messageId)>.json`` replaced atomically: ``handled`` (with the Task
ID) once the event was accepted, before its inbox file is removed (operation
``handled:<messageId>``, idempotent; a failure leaves the file for the next scan),
then ``replied`` (with the response ID and the Task's state) when its reply file was
written. A state never moves back.

Identity: principal ``agent:`` + h(from); dedupe key ``event:`` + h(messageId);
conversation key ``conversation:`` + h(conversationId).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import trio

from taskplane.actors.native import Recovery
from taskplane.errors import InvalidRequest, PayloadTooLarge, Refused, TaskplaneError
from taskplane.model.codec import decode
from taskplane.model.limits import check_parts_size
from taskplane.model.types import Part
from taskplane.settings import RelaySettings
from taskplane.sources.base import Event, Result, Sender, SourceContext
from taskplane.sources.identity import native_value, source_identifier
from taskplane.sources.relay_spool import (
    describe,
    move_aside,
    read_entry,
    write_once,
    write_receipt,
)

log = logging.getLogger("taskplane.sources.relay")

NAME = "relay"
SCAN_INTERVAL_S = 0.2
RETRY_S = 1.0
MALFORMED = "malformed"
MAX_FILE_BYTES = 1 << 20
"""Largest inbox file read: 1 MiB (1,048,576 bytes), like an A2A request body. A
larger file is set aside unread; at most this plus one byte is ever read."""


class RelayConfigError(ValueError):
    """A relay directory is missing or unusable."""


@attrs.define(eq=False)
class RelaySource:
    """The agent relay; see the module docstring."""

    spool: Path
    outbox: Path
    scan_interval_s: float = SCAN_INTERVAL_S
    receipts: Path | None = None
    name: str = NAME
    recovery: Recovery = "idempotent"
    supports_anchors: bool = True
    _stuck: set[str] = attrs.field(factory=set, init=False)

    @classmethod
    def from_settings(cls, settings: RelaySettings) -> RelaySource:
        """The relay over ``RELAY_SPOOL_DIR`` and ``RELAY_OUTBOX_DIR`` (both required),
        with receipts in ``RELAY_RECEIPTS_DIR`` when it is set.

        Raises:
            RelayConfigError: a directory is not set.
        """
        if settings.spool_dir is None or settings.outbox_dir is None:
            raise RelayConfigError("the relay needs RELAY_SPOOL_DIR and RELAY_OUTBOX_DIR")
        return cls(settings.spool_dir, settings.outbox_dir, receipts=settings.receipts_dir)

    async def run(
        self, ctx: SourceContext, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Check both directories, then scan the inbox until cancelled.

        Raises:
            RelayConfigError: a directory does not exist (before ``started``).
        """
        dirs = [("RELAY_SPOOL_DIR", self.spool), ("RELAY_OUTBOX_DIR", self.outbox)]
        if self.receipts is not None:
            dirs.append(("RELAY_RECEIPTS_DIR", self.receipts))
        for var, path in dirs:
            if not await trio.Path(path).is_dir():
                raise RelayConfigError(f"{var}={path} is not a directory")
        await trio.Path(self.spool / MALFORMED).mkdir(exist_ok=True)
        task_status.started()
        while True:
            busy = await self.scan(ctx)
            await trio.sleep(RETRY_S if busy else self.scan_interval_s)

    async def scan(self, ctx: SourceContext) -> bool:
        """Take every inbox file once; ``True`` if the plane was too busy for one."""
        names = sorted(
            p.name
            for p in await trio.Path(self.spool).iterdir()
            if p.name.endswith(".json") and not p.name.startswith(".")
        )
        self._stuck.intersection_update(names)
        for name in names:
            if not await self._take(ctx, self.spool / name):
                return True
        return False

    async def _take(self, ctx: SourceContext, path: Path) -> bool:
        if path.name in self._stuck:
            return True  # could not be set aside; reported once, skipped until it goes
        try:
            raw = await trio.to_thread.run_sync(read_entry, path, MAX_FILE_BYTES)
        except FileNotFoundError:
            return True
        except OSError as exc:  # not a regular file, a symlink, too large, unreadable
            await self._set_aside(ctx, path, "malformed", describe(exc))
            return True
        try:
            event = parse_event(raw)
        except (ValueError, RecursionError, InvalidRequest, PayloadTooLarge) as exc:
            await self._set_aside(ctx, path, "malformed", str(exc) or type(exc).__name__)
            return True
        try:
            task_id = await ctx.ingest(event)
        except Refused as exc:  # permanent: the same file would be refused again
            await self._set_aside(ctx, path, "refused", str(exc))
            return True
        except TaskplaneError:
            return False  # not recorded (transient, or a fault): the file stays for the next scan
        if not await self._handled(ctx, task_id, event):
            return False  # the receipt failed: the file stays, the next scan repeats both
        await trio.Path(path).unlink(missing_ok=True)
        log.info(
            "relay event %s accepted as task %s",
            path.name,
            task_id,
            extra={"event": "source_event_accepted", "source": self.name, "taskId": task_id},
        )
        return True

    async def _handled(self, ctx: SourceContext, task_id: str, event: Event) -> bool:
        """The ``handled`` receipt of an accepted event (when receipts are kept);
        ``False`` if it could not be written."""
        if self.receipts is None:
            return True
        record: dict[str, object] = {**event.locator, "state": "handled", "taskId": task_id}
        name = receipt_name(event.locator)
        directory = self.receipts

        async def write() -> str:
            await trio.to_thread.run_sync(write_receipt, directory, name, record)
            return name

        message_id = event.locator["messageId"]
        try:
            await ctx.deliver(task_id, f"handled:{message_id}", json.dumps(record), write)
        except TaskplaneError as exc:
            log.warning(
                "the receipt of relay message %s was not written: %s",
                message_id,
                exc,
                extra={"event": "source_ack_failed", "source": self.name},
            )
            return False
        return True

    async def _set_aside(self, ctx: SourceContext, path: Path, kind: str, error: str) -> None:
        """Record evidence, then move the entry itself (never what a symlink names)
        into ``malformed/`` under a name no earlier entry holds. If the move fails the
        entry is skipped (and reported once) until it leaves the spool."""
        await ctx.evidence(kind, {"file": path.name, "error": error[:500]})
        try:
            target = await trio.to_thread.run_sync(move_aside, path, self.spool / MALFORMED)
        except FileNotFoundError:
            return
        except OSError as exc:
            self._stuck.add(path.name)
            log.error(
                "relay file %s could not be set aside: %s",
                path.name,
                exc,
                extra={"event": "source_event_stuck", "source": self.name, "file": path.name},
            )
            return
        log.warning(
            "relay file %s set aside (%s) as %s: %s",
            path.name,
            kind,
            target.name,
            error,
            extra={"event": "source_event_set_aside", "source": self.name, "file": path.name},
        )

    def sender(self, result: Result) -> Sender:
        """Write one reply file named by the stable response ID."""
        response_id = "response-" + result.delivery.delivery_id.removeprefix("delivery-")
        body = {
            "from": "taskplane",
            "to": result.locator.get("from", ""),
            "conversationId": result.locator.get("conversationId", ""),
            "messageId": response_id,
            "inReplyTo": result.locator.get("messageId", ""),
            "taskId": result.task.id,
            "state": result.state.name,
            "text": result.text,
        }
        data = json.dumps(body, sort_keys=True, indent=1).encode()
        receipts = self.receipts
        receipt: dict[str, object] = {
            "from": body["to"],
            "conversationId": body["conversationId"],
            "messageId": body["inReplyTo"],
            "state": "replied",
            "taskId": result.task.id,
            "taskState": result.state.name,
            "responseId": response_id,
        }

        async def send() -> str:
            await trio.to_thread.run_sync(write_once, self.outbox, response_id + ".json", data)
            if receipts is not None and result.locator.get("messageId"):
                name = receipt_name(result.locator)
                await trio.to_thread.run_sync(write_receipt, receipts, name, receipt)
            return response_id

        return Sender(send=send, anchor=response_id)


def receipt_name(locator: Mapping[str, str]) -> str:
    """The receipt file of the message ``locator`` names:
    ``receipt-`` + h(from, messageId) + ``.json``."""
    return (
        source_identifier("receipt", locator["from"], locator["messageId"]).replace(":", "-")
        + ".json"
    )


def parse_event(raw: bytes) -> Event:
    """The :class:`Event` of one inbox file.

    Raises:
        ValueError, RecursionError, InvalidRequest: not a JSON object of the
            documented shape.
        PayloadTooLarge: its parts are over ``MAX_MESSAGE_BYTES`` (as an A2A send).
    """
    doc: Any = json.loads(raw)
    if not isinstance(doc, dict):
        raise ValueError("an inbox file must hold a JSON object")
    unknown = set(doc) - {"from", "conversationId", "messageId", "parts", "text", "replyTo"}
    if unknown:
        raise ValueError(f"unknown fields: {', '.join(sorted(unknown))}")
    sender = native_value(doc.get("from"), "from")
    conversation = native_value(doc.get("conversationId"), "conversationId")
    message_id = native_value(doc.get("messageId"), "messageId")
    reply_to = doc.get("replyTo")
    if reply_to is not None:
        reply_to = native_value(reply_to, "replyTo")
    if ("parts" in doc) == ("text" in doc):
        raise ValueError('an inbox file needs exactly one of "parts" and "text"')
    if "text" in doc:
        if not isinstance(doc["text"], str) or not doc["text"].strip():
            raise ValueError('"text" must be a non-empty string')
        parts: tuple[Part, ...] = (Part(text=doc["text"]),)
    else:
        if not isinstance(doc["parts"], list) or not doc["parts"]:
            raise ValueError('"parts" must be a non-empty array of A2A Parts')
        parts = tuple(decode(p, Part, path=f"parts[{i}]") for i, p in enumerate(doc["parts"]))
    check_parts_size(parts)
    locator = {"from": sender, "conversationId": conversation, "messageId": message_id}
    return Event(
        principal=source_identifier("agent", sender),
        identity=(message_id,),
        conversation=(conversation,),
        parts=parts,
        locator=locator,
        reply_to=reply_to,
    )
