"""Zulip through its event queue API (conformance matrix, "Zulip" row).

At start ``GET /api/v1/users/me`` (``ZULIP_EMAIL`` and ``ZULIP_API_KEY`` over HTTP
Basic) names the bot. The source resumes the stored event queue, or registers one
(``POST /api/v1/register``, ``event_types=["message"]``), and long-polls
``GET /api/v1/events`` from the stored ``last_event_id``.

Each event is handled in order, and the checkpoint (queue ID and ``last_event_id``)
is saved after each one was accepted or classified: that advance is the ack, since
the next poll from it tells Zulip the earlier events are done. A message that
mentions the bot in a stream (the ``mentioned`` flag), or a direct message to it, is
work; the bot's own messages and other messages are non-work, counted in the
checkpoint; heartbeats only advance it. A transient failure (the agent's queue full,
the store or Zulip unavailable, a rate limit) holds the checkpoint: the same events
are fetched again. The checkpoint also keeps ``lastMessageId``, the newest message
handled (at the first registration, the queue's ``max_message_id``). When the queue is
gone (``BAD_EVENT_QUEUE_ID``, Zulip drops idle queues after about ten minutes) a
replacement is registered, and the messages after ``lastMessageId`` up to the
replacement's ``max_message_id`` are caught up (:mod:`taskplane.sources.zulip_catchup`)
before its first poll; the pending catch-up is in the checkpoint (``catchUpTo``), so
a held or interrupted one resumes from the last message taken.

Identity: principal ``zulip:`` + h(site, bot user ID); dedupe key ``event:`` +
h(message ID); conversation ``conversation:`` + h(``stream``, stream ID, topic) for a
stream message, h(``direct``, the sorted participant IDs) for a direct message. After
acceptance the bot reacts ``white_check_mark`` (operation ``handled:<message ID>``,
idempotent: ``REACTION_ALREADY_EXISTS`` means it is there). The reply goes to the same
topic or to the same direct-message participants; Zulip has no idempotency key and
the source does no lookup, so it uses the ``ambiguous`` policy.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import httpx
import trio

from taskplane.actors.native import Recovery
from taskplane.actors.outbound import DeliveryFailed, ProviderRejected
from taskplane.backoff import backoff
from taskplane.errors import Refused, TaskplaneError
from taskplane.model.types import Part
from taskplane.settings import ZulipSettings
from taskplane.sources.base import Event, Result, Sender, SourceContext, load_state
from taskplane.sources.identity import source_identifier
from taskplane.sources.rate_limit import held_poll_wait
from taskplane.sources.receipt import acknowledge
from taskplane.sources.zulip_api import (
    LONG_POLL_S,
    TIMEOUT_S,
    QueueGone,
    ZulipApi,
    ZulipRateLimited,
    ZulipRejected,
    ZulipUnavailable,
)
from taskplane.sources.zulip_catchup import catch_up

log = logging.getLogger("taskplane.sources.zulip")

NAME = "zulip"
RECEIPT_EMOJI = "white_check_mark"
RETRY_FIRST_S = 1.0
RETRY_CAP_S = 30.0


class _Held(Exception):
    """An event could not be taken yet: the checkpoint stays, fetch it again."""


def retry_later(exc: BaseException) -> bool:
    """The Zulip source's one provider-error decision: ``True`` holds the checkpoint
    and fetches the same events again (Zulip is unavailable or rate limits, or the
    plane answered anything but :class:`~taskplane.errors.Refused`); ``False`` is a
    permanent outcome (the message is refused with evidence, or its receipt is given
    up with a log line)."""
    if isinstance(exc, DeliveryFailed):
        return exc.__cause__ is None or retry_later(exc.__cause__)
    if isinstance(exc, ZulipUnavailable | ZulipRateLimited | _Held):
        return True
    if isinstance(exc, Refused):
        return False
    return isinstance(exc, TaskplaneError)  # transient, or a fault of the plane


def classify(event: Mapping[str, Any], bot_user: int) -> str:
    """``work`` for a message event that mentions the bot or is a direct message to
    it; else ``heartbeat``, ``other-event``, ``own-message`` or ``not-a-mention``."""
    kind = event.get("type")
    if kind == "heartbeat":
        return "heartbeat"
    message = event.get("message")
    if kind != "message" or not isinstance(message, dict):
        return "other-event"
    if message.get("sender_id") == bot_user:
        return "own-message"
    flags = event.get("flags") or ()
    direct = message.get("type") in ("private", "direct")
    if direct or "mentioned" in flags or "wildcard_mentioned" in flags:
        return "work"
    return "not-a-mention"


def message_event(principal: str, message: Mapping[str, Any]) -> Event:
    """The :class:`Event` of a work message.

    Raises:
        ValueError: the message lacks its ID, stream, topic or recipients.
    """
    message_id = message.get("id")
    if not isinstance(message_id, int):
        raise ValueError("the message has no id")
    sender = str(message.get("sender_full_name") or message.get("sender_email") or "someone")
    content = str(message.get("content", ""))
    locator: dict[str, str] = {"messageId": str(message_id)}
    if message.get("type") in ("private", "direct"):
        recipients = message.get("display_recipient")
        if not isinstance(recipients, list) or not recipients:
            raise ValueError("a direct message needs its recipients")
        ids = sorted(str(r.get("id")) for r in recipients if isinstance(r, dict))
        conversation = ("direct", *ids)
        locator |= {"kind": "direct", "participants": ",".join(ids)}
        where = "a direct message"
    else:
        stream_id, topic = message.get("stream_id"), message.get("subject")
        if not isinstance(stream_id, int) or not isinstance(topic, str) or not topic:
            raise ValueError("a stream message needs its stream_id and topic")
        conversation = ("stream", str(stream_id), topic)
        locator |= {"kind": "stream", "streamId": str(stream_id), "topic": topic}
        where = f"#{message.get('display_recipient', stream_id)} > {topic}"
    return Event(
        principal=principal,
        identity=(str(message_id),),
        conversation=conversation,
        parts=(Part(text=f"Zulip message from {sender} in {where}:\n{content}"),),
        locator=locator,
    )


@attrs.define(eq=False)
class ZulipSource:
    """The Zulip source; see the module docstring."""

    site: str
    email: str
    api_key: str = attrs.field(repr=False)
    name: str = NAME
    recovery: Recovery = "ambiguous"
    supports_anchors: bool = False
    clock: Callable[[], float] = time.time
    """Unix time in seconds, for the catch-up's age bound."""
    _api: ZulipApi | None = None
    _bot_user: int = 0

    @classmethod
    def from_settings(cls, settings: ZulipSettings) -> ZulipSource:
        """The source ``settings`` describe: ``ZULIP_SITE``, ``ZULIP_EMAIL`` and
        ``ZULIP_API_KEY`` (all required).

        Raises:
            ValueError: one is not set (the message names all three).
        """
        if not settings.site or not settings.email or not settings.api_key:
            raise ValueError("the zulip source needs ZULIP_SITE, ZULIP_EMAIL and ZULIP_API_KEY")
        return cls(settings.site, settings.email, settings.api_key)

    async def run(
        self, ctx: SourceContext, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Name the bot (a failure is a start failure), then poll events until
        cancelled."""
        async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
            api = ZulipApi(client, self.site, self.email, self.api_key)
            me = await api.call("GET", "/users/me")
            self._bot_user = int(me["user_id"])
            principal = source_identifier("zulip", self.site, str(self._bot_user))
            self._api = api
            task_status.started()
            delays = backoff(RETRY_FIRST_S, RETRY_CAP_S)
            try:
                while True:
                    try:
                        await self.poll(ctx, api, principal)
                        delays = backoff(RETRY_FIRST_S, RETRY_CAP_S)
                    except Exception as exc:
                        if not retry_later(exc):
                            raise
                        wait = held_poll_wait(
                            exc,
                            limited_wait=exc.wait_s if isinstance(exc, ZulipRateLimited) else None,
                            delays=delays,
                            log=log,
                            what="zulip events",
                            source=self.name,
                        )
                        await trio.sleep(wait)
            finally:
                self._api = None

    async def poll(self, ctx: SourceContext, api: ZulipApi, principal: str) -> None:
        """One long poll from the checkpoint, and every event it returns.

        Raises:
            an error :func:`retry_later` keeps: the checkpoint holds at the last
                event taken.
        """
        state = await load_state(ctx, principal)
        if not state.get("queueId"):
            state = await self._register(ctx, api, principal, state)
        if "catchUpTo" in state:
            state = await self._catch_up(ctx, api, principal, state)
        params = {"queue_id": state["queueId"], "last_event_id": state["lastEventId"]}
        try:
            answer = await api.call("GET", "/events", params, timeout_s=LONG_POLL_S)
        except QueueGone:
            log.warning(
                "the zulip event queue is gone; registering a new one",
                extra={"event": "source_queue_replaced", "source": self.name},
            )
            state = await self._register(ctx, api, principal, state)
            if "catchUpTo" in state:
                await self._catch_up(ctx, api, principal, state)
            return
        for event in sorted(answer.get("events", ()), key=lambda e: int(e.get("id", -1))):
            await self.take(ctx, principal, event)
            state = await load_state(ctx, principal)
            fresh = {**state, "lastEventId": int(event["id"])}
            message = event.get("message")
            if event.get("type") == "message" and isinstance(message, dict):
                fresh = _handled(fresh, message.get("id"))
            await ctx.save_checkpoint(principal, fresh)

    async def _register(
        self, ctx: SourceContext, api: ZulipApi, principal: str, state: dict[str, Any]
    ) -> dict[str, Any]:
        """A new queue, then the catch-up it needs, both in the checkpoint: with no
        ``lastMessageId`` yet intake starts at the queue (``lastMessageId`` becomes its
        ``max_message_id``), else ``catchUpTo`` is that ``max_message_id`` (``None``
        when Zulip gives none: up to the newest)."""
        queue = await api.call("POST", "/register", {"event_types": ["message"]})
        newest = queue.get("max_message_id")
        newest = newest if isinstance(newest, int) else None
        fresh = {**state, "queueId": queue["queue_id"], "lastEventId": int(queue["last_event_id"])}
        fresh.pop("catchUpTo", None)
        last = state.get("lastMessageId")
        if isinstance(last, int):
            if newest is None or newest > last:
                fresh["catchUpTo"] = newest
        elif newest is not None:
            fresh["lastMessageId"] = newest
            if state.get("queueId"):
                log.warning(
                    "the zulip checkpoint names no last message; messages sent while no "
                    "queue existed are not caught up",
                    extra={"event": "source_catchup_unanchored", "source": self.name},
                )
        await ctx.save_checkpoint(principal, fresh)
        return fresh

    async def _catch_up(
        self, ctx: SourceContext, api: ZulipApi, principal: str, state: dict[str, Any]
    ) -> dict[str, Any]:
        """The pending catch-up of ``state`` (``catchUpTo``), from ``lastMessageId``;
        each message taken like a queue event and checkpointed after it; the new state.

        Raises:
            an error :func:`retry_later` keeps (``catchUpTo`` stays: the next poll
                resumes from the last message taken).
        """
        upto = state.get("catchUpTo")

        async def take(message: dict[str, Any]) -> None:
            event = {"type": "message", "message": message, "flags": message.get("flags") or []}
            await self.take(ctx, principal, event)
            current = await load_state(ctx, principal)
            await ctx.save_checkpoint(principal, _handled(current, message["id"]))

        taken = 0
        try:
            taken = await catch_up(
                api,
                int(state["lastMessageId"]),
                upto if isinstance(upto, int) else None,
                self.clock(),
                take,
            )
        except ZulipRateLimited:
            raise
        except (ZulipRejected, ValueError) as exc:
            log.warning(
                "the zulip catch-up failed (%s); messages sent while no queue existed are "
                "not taken",
                exc,
                extra={"event": "source_catchup_failed", "source": self.name},
            )
        current = await load_state(ctx, principal)
        current.pop("catchUpTo", None)
        if isinstance(upto, int):
            current = _handled(current, upto)
        await ctx.save_checkpoint(principal, current)
        if taken > 0:
            log.info(
                "zulip catch-up took %d messages",
                taken,
                extra={"event": "source_caught_up", "source": self.name},
            )
        return current

    async def take(self, ctx: SourceContext, principal: str, event: Mapping[str, Any]) -> None:
        """Accept, count or refuse one event, then its receipt.

        Raises:
            _Held, or an error :func:`retry_later` keeps (a retry repeats harmlessly).
        """
        kind = classify(event, self._bot_user)
        if kind == "heartbeat":
            return
        message = event.get("message") or {}
        if kind != "work":
            state = await load_state(ctx, principal)
            counters = dict(state.get("nonWork", {}))
            counters[kind] = counters.get(kind, 0) + 1
            await ctx.save_checkpoint(principal, {**state, "nonWork": counters})
            return
        record = {"messageId": str(message.get("id"))}
        record |= {"eventId": str(event["id"])} if "id" in event else {"via": "catch-up"}
        try:
            work = message_event(principal, message)
        except ValueError as exc:
            await ctx.evidence("malformed", {**record, "error": str(exc)})
            return
        try:
            task_id = await ctx.ingest(work)
        except TaskplaneError as exc:
            if retry_later(exc):
                raise _Held(f"message {record['messageId']} not accepted yet: {exc}") from exc
            await ctx.evidence("refused", {**record, "error": str(exc)})
            return
        await self._receipt(ctx, task_id, str(message["id"]))

    async def _receipt(self, ctx: SourceContext, task_id: str, message_id: str) -> None:
        async def react() -> str:
            try:
                await self._connected().call(
                    "POST", f"/messages/{message_id}/reactions", {"emoji_name": RECEIPT_EMOJI}
                )
            except ZulipRejected as exc:
                if exc.code != "REACTION_ALREADY_EXISTS":
                    raise
            return f"{message_id}:{RECEIPT_EMOJI}"

        await acknowledge(
            ctx,
            task_id,
            f"handled:{message_id}",
            RECEIPT_EMOJI,
            react,
            retry_later=retry_later,
            log=log,
            what=f"the receipt of message {message_id}",
            source=self.name,
        )

    def _connected(self) -> ZulipApi:
        if self._api is None:
            raise ProviderRejected("the zulip source is not connected")
        return self._api

    def sender(self, result: Result) -> Sender:
        """One message to the same topic, or to the same direct-message participants
        (``ambiguous`` policy)."""
        locator = result.locator
        params: dict[str, object]
        if locator.get("kind") == "direct":
            others = [int(p) for p in locator["participants"].split(",")]
            others = [p for p in others if p != self._bot_user] or others
            params = {"type": "direct", "to": others, "content": result.text}
        else:
            params = {
                "type": "stream",
                "to": int(locator["streamId"]),
                "topic": locator["topic"],
                "content": result.text,
            }

        async def send() -> str:
            answer = await self._connected().call("POST", "/messages", params)
            return str(answer["id"])

        return Sender(send=send)


def _handled(state: dict[str, Any], message_id: object) -> dict[str, Any]:
    """``state`` with ``lastMessageId`` moved up to ``message_id`` (never down)."""
    if not isinstance(message_id, int):
        return state
    last = state.get("lastMessageId")
    return {**state, "lastMessageId": max(message_id, last if isinstance(last, int) else -1)}
