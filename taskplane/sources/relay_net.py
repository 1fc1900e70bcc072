"""Agent relay over a relay server (conformance matrix, "Agent relay" row: "relay
cursor (journal checkpoint + server ``ack``)"); the protocol is specified in
``docs/sources/relay.md``, "Relay server protocol".

At start ``GET /v1/agent`` checks ``RELAY_TOKEN`` and names the agent taskplane speaks
as (a refusal is a start failure). Then the source long-polls ``GET /v1/messages``
after the stored cursor. Each message of a page is taken in order: accepted into a
Task (its ``handled`` receipt written when ``RELAY_RECEIPTS_DIR`` is set), or
classified with ``source.evidence`` (``malformed``, or ``refused`` for a
``messageId`` reused with another payload). Only then is its cursor saved as the
checkpoint, and only then acknowledged (``POST /v1/ack``, cumulative and idempotent).
A stored cursor is acknowledged again before the next page is asked for, so an ack a
crash or a failure cut off is made up first (design document, "A source may advance
its checkpoint or acknowledge the provider only after acceptance").

A transient failure (the agent's queue full, the store or the server unavailable, a
dropped connection, a rate limit) holds the checkpoint: the next poll, after the
backoff (1 s doubling to 30 s) or the server's ``Retry-After``, asks again from the
same cursor, and a message accepted before is a duplicate then (the same Task). The
backoff starts over after a poll that took its whole page, and after one that saved
a message's cursor before it failed. A
``410 cursor_expired`` starts again from the oldest message the server has not had
acknowledged (``source_cursor_reset``). Any other refusal of a poll crashes the
source, which its supervisor restarts (bounded).

Replies: ``POST /v1/responses`` with the reply object of
:mod:`taskplane.sources.relay_message`; its ``messageId`` is the stable response ID,
which the server deduplicates, so a delivery a crash left ``sending`` is sent again
(recovery ``idempotent``) and the server keeps one. A reply that asks for input is a
reply anchor, as over the spool.

Identity, conversation keys and receipts are the spool's
(:mod:`taskplane.sources.relay_message`): the same message over either transport is
the same event. The checkpoint ``{"cursor": ...}`` is kept under the principal
``relay:`` + h(``RELAY_URL``).
"""

from __future__ import annotations

import logging
from pathlib import Path

import attrs
import httpx
import trio

from taskplane.actors.native import Recovery
from taskplane.actors.outbound import DeliveryFailed, ProviderRejected
from taskplane.backoff import backoff
from taskplane.errors import InvalidRequest, PayloadTooLarge, Refused, TaskplaneError
from taskplane.sources.base import Result, Sender, SourceContext
from taskplane.sources.identity import source_identifier
from taskplane.sources.rate_limit import held_poll_wait
from taskplane.sources.relay_api import (
    PAGE_LIMIT,
    TIMEOUT_S,
    CursorExpired,
    PageUnreadable,
    RelayApi,
    RelayRateLimited,
    RelayRejected,
    RelayUnavailable,
)
from taskplane.sources.relay_message import (
    RelayConfigError,
    parse_message,
    record_handled,
    reply,
    response_id,
    write_replied,
)
from taskplane.sources.relay_page import PageItem

log = logging.getLogger("taskplane.sources.relay")

NAME = "relay"
RETRY_FIRST_S = 1.0
RETRY_CAP_S = 30.0


class _Held(Exception):
    """A message could not be taken yet: the checkpoint stays, ask for it again."""


def retry_later(exc: BaseException) -> bool:
    """The network relay's one provider-error decision: ``True`` holds the checkpoint
    and asks for the same messages again (the server is unavailable or rate limits,
    or the plane answered anything but :class:`~taskplane.errors.Refused`); ``False``
    is a refusal of the server that no retry changes (the source crashes)."""
    if isinstance(exc, DeliveryFailed):
        return exc.__cause__ is None or retry_later(exc.__cause__)
    if isinstance(exc, RelayUnavailable | RelayRateLimited | _Held):
        return True
    if isinstance(exc, RelayRejected | Refused):
        return False
    return isinstance(exc, TaskplaneError)  # transient, or a fault of the plane


@attrs.define(eq=False)
class RelayNetSource:
    """The agent relay over a relay server; see the module docstring."""

    url: str
    token: str = attrs.field(repr=False)
    receipts: Path | None = None
    name: str = NAME
    recovery: Recovery = "idempotent"
    supports_anchors: bool = True
    _api: RelayApi | None = None
    _agent: str = ""
    _acked: str | None = None
    """The newest cursor the server confirmed this run (in memory only)."""
    transport: httpx.AsyncBaseTransport | None = attrs.field(default=None, repr=False)
    """The HTTP transport (``None``: the network)."""
    _progressed: bool = False
    """A message's cursor was saved since the last failure: the poll backoff starts
    over at the next one."""
    _limit: int = PAGE_LIMIT
    """The ``limit`` of the next poll: halved after a page too large or undecodable
    as a whole, back to :data:`PAGE_LIMIT` after a page was decoded."""

    @property
    def principal(self) -> str:
        """The checkpoint's principal: ``relay:`` + h(``RELAY_URL``)."""
        return source_identifier("relay", self.url.rstrip("/"))

    async def run(
        self, ctx: SourceContext, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Check the receipts directory and the token (before ``started``), then poll
        until cancelled.

        Raises:
            RelayConfigError: ``RELAY_RECEIPTS_DIR`` is not a directory.
            RelayRejected, RelayUnavailable: the server refused the token or cannot
                be reached (a start failure).
        """
        if self.receipts is not None and not await trio.Path(self.receipts).is_dir():
            raise RelayConfigError(f"RELAY_RECEIPTS_DIR={self.receipts} is not a directory")
        async with httpx.AsyncClient(timeout=TIMEOUT_S, transport=self.transport) as client:
            api = RelayApi(client, self.url, self.token)
            self._agent = await api.agent()
            self._acked = None
            self._api = api
            task_status.started()
            delays = backoff(RETRY_FIRST_S, RETRY_CAP_S)
            try:
                while True:
                    try:
                        await self.poll(ctx, api)
                        delays = backoff(RETRY_FIRST_S, RETRY_CAP_S)
                    except Exception as exc:
                        if not retry_later(exc):
                            raise
                        if self._progressed:  # the page moved on before it failed
                            delays = backoff(RETRY_FIRST_S, RETRY_CAP_S)
                        self._progressed = False
                        wait = held_poll_wait(
                            exc,
                            limited_wait=exc.wait_s if isinstance(exc, RelayRateLimited) else None,
                            delays=delays,
                            log=log,
                            what="relay messages",
                            source=self.name,
                        )
                        await trio.sleep(wait)
            finally:
                self._api = None

    async def poll(self, ctx: SourceContext, api: RelayApi) -> None:
        """Acknowledge the stored cursor unless the server confirmed it, then one long
        poll after it, and every message it returns.

        Raises:
            an error :func:`retry_later` keeps: the checkpoint holds at the last
                message taken.
        """
        cursor = await self._cursor(ctx)
        if cursor is not None and cursor != self._acked:
            await self._ack(api, cursor)
        try:
            page = await api.messages(cursor, self._limit)
        except PageUnreadable as exc:
            if self._limit == 1:
                raise
            self._limit = max(1, self._limit // 2)
            log.warning(
                "relay page after %s not decoded (%s); asking for %d at a time",
                cursor,
                exc,
                self._limit,
                extra={"event": "source_poll_failed", "source": self.name},
            )
            return
        except CursorExpired as exc:
            log.warning(
                "the relay server no longer knows cursor %s (%s); starting from its oldest"
                " message not acknowledged",
                cursor,
                exc,
                extra={"event": "source_cursor_reset", "source": self.name},
            )
            await ctx.save_checkpoint(self.principal, {"cursor": None})
            return
        self._limit = PAGE_LIMIT
        for item in page:
            await self.take(ctx, item)
            await ctx.save_checkpoint(self.principal, {"cursor": item.cursor})
            self._progressed = True
            await self._ack(api, item.cursor)

    async def take(self, ctx: SourceContext, item: PageItem) -> None:
        """Accept, or classify with evidence, the message of ``item``.

        Raises:
            _Held: not accepted yet (transient), or its ``handled`` receipt was not
                written: a retry repeats both harmlessly (the event is a duplicate).
        """
        cursor, message = item.cursor, item.message
        found = message.get("messageId") if isinstance(message, dict) else None
        record: dict[str, object] = {"cursor": cursor, "messageId": str(found or "")[:500]}
        if item.error:
            await ctx.evidence("malformed", {**record, "error": item.error})
            return
        try:
            event = parse_message(message, ignore_unknown=True)
        except (ValueError, RecursionError, InvalidRequest, PayloadTooLarge) as exc:
            await ctx.evidence("malformed", {**record, "error": (str(exc) or repr(exc))[:500]})
            return
        try:
            task_id = await ctx.ingest(event)
        except Refused as exc:  # permanent: the same message would be refused again
            await ctx.evidence("refused", {**record, "error": str(exc)[:500]})
            return
        except TaskplaneError as exc:
            raise _Held(f"relay message at {cursor} not accepted yet: {exc}") from exc
        if not await record_handled(ctx, self.receipts, task_id, event, log=log, source=self.name):
            raise _Held(f"the receipt of the relay message at {cursor} was not written")
        log.info(
            "relay message at %s accepted as task %s",
            cursor,
            task_id,
            extra={"event": "source_event_accepted", "source": self.name, "taskId": task_id},
        )

    async def _ack(self, api: RelayApi, cursor: str) -> None:
        """``POST /v1/ack`` of ``cursor``; a definite refusal is logged once
        (``source_ack_failed``) and not repeated: the checkpoint has passed it.

        Raises:
            RelayRateLimited, RelayUnavailable: the ack is owed (made before the next
                page).
        """
        try:
            await api.ack(cursor)
        except RelayRejected as exc:
            if isinstance(exc, RelayRateLimited):
                raise
            log.warning(
                "the relay server refused the ack of cursor %s: %s",
                cursor,
                exc,
                extra={"event": "source_ack_failed", "source": self.name},
            )
        self._acked = cursor

    async def _cursor(self, ctx: SourceContext) -> str | None:
        value = await ctx.load_checkpoint(self.principal)
        cursor = value.get("cursor") if isinstance(value, dict) else None
        return cursor if isinstance(cursor, str) and cursor else None

    def sender(self, result: Result) -> Sender:
        """``POST /v1/responses`` of the reply, under its stable response ID
        (``idempotent`` policy: the server deduplicates it)."""
        rid = response_id(result)
        receipts = self.receipts

        async def send() -> str:
            api = self._api
            if api is None:
                raise ProviderRejected("the relay is not connected to its server")
            answer = reply(result, self._agent)
            await api.respond(answer)
            await write_replied(receipts, result, answer)
            return rid

        return Sender(send=send, anchor=rid)
