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
conversation key ``conversation:`` + h(conversationId) (the message shapes, shared
with the other transport, are :mod:`taskplane.sources.relay_message`).

With ``RELAY_URL`` set, the same relay runs over a relay server instead of the spool:
:mod:`taskplane.sources.relay_net`.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import attrs
import trio

from taskplane.actors.native import Recovery
from taskplane.errors import InvalidRequest, PayloadTooLarge, Refused, TaskplaneError
from taskplane.settings import RelaySettings
from taskplane.sources.base import Result, Sender, Source, SourceContext
from taskplane.sources.relay_message import RelayConfigError as RelayConfigError
from taskplane.sources.relay_message import parse_event as parse_event
from taskplane.sources.relay_message import receipt_name as receipt_name
from taskplane.sources.relay_message import record_handled, reply, write_replied
from taskplane.sources.relay_net import RelayNetSource
from taskplane.sources.relay_spool import describe, move_aside, read_entry, write_once

log = logging.getLogger("taskplane.sources.relay")

NAME = "relay"
SCAN_INTERVAL_S = 0.2
RETRY_S = 1.0
MALFORMED = "malformed"
SPOOL_SENDER = "taskplane"
"""The ``from`` of every reply file."""
MAX_FILE_BYTES = 1 << 20
"""Largest inbox file read: 1 MiB (1,048,576 bytes), like an A2A request body. A
larger file is set aside unread; at most this plus one byte is ever read."""


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
    def from_settings(cls, settings: RelaySettings) -> Source:
        """The relay ``settings`` describe: over a relay server when ``RELAY_URL`` is
        set (:class:`~taskplane.sources.relay_net.RelayNetSource`, with
        ``RELAY_TOKEN``), else over ``RELAY_SPOOL_DIR`` and ``RELAY_OUTBOX_DIR`` (both
        required); with receipts in ``RELAY_RECEIPTS_DIR`` when it is set.

        Raises:
            RelayConfigError: a required variable is not set, or both transports are
                configured.
        """
        if settings.url is not None:
            if settings.spool_dir is not None or settings.outbox_dir is not None:
                raise RelayConfigError(
                    "RELAY_URL excludes RELAY_SPOOL_DIR and RELAY_OUTBOX_DIR: choose one transport"
                )
            if not settings.token:
                raise RelayConfigError("the relay over RELAY_URL needs RELAY_TOKEN")
            return RelayNetSource(settings.url, settings.token, receipts=settings.receipts_dir)
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
        if not await record_handled(ctx, self.receipts, task_id, event, log=log, source=self.name):
            return False  # the receipt failed: the file stays, the next scan repeats both
        await trio.Path(path).unlink(missing_ok=True)
        log.info(
            "relay event %s accepted as task %s",
            path.name,
            task_id,
            extra={"event": "source_event_accepted", "source": self.name, "taskId": task_id},
        )
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
        answer = reply(result, SPOOL_SENDER)
        data = json.dumps(answer, sort_keys=True, indent=1).encode()
        name = answer["messageId"] + ".json"

        async def send() -> str:
            await trio.to_thread.run_sync(write_once, self.outbox, name, data)
            await write_replied(self.receipts, result, answer)
            return answer["messageId"]

        return Sender(send=send, anchor=answer["messageId"])
