"""Slack over Socket Mode (conformance matrix, "Slack" row).

At start ``auth.test`` (``SLACK_BOT_TOKEN``) names the workspace and the bot user, and
``apps.connections.open`` (``SLACK_APP_TOKEN``) gives the WebSocket URL. Each
``events_api`` envelope is handled in order and acknowledged only after its outcome is
durable: an ``app_mention`` in an allowed channel (``SLACK_ALLOWED_CHANNELS``, all if
unset) is accepted as work; anything else is non-work, folded into one durable counter
per workspace/channel/classification (the source's checkpoint); a malformed envelope
gets exact ``source.evidence``. An envelope whose acceptance failed is not
acknowledged, so Slack delivers it again. A ``disconnect`` envelope or a dropped socket
reconnects with backoff (1 s doubling to 30 s).

Identity: principal ``slack:`` + h(team ID); dedupe key ``event:`` + h(event ID);
conversation ``conversation:`` + h(team, channel, thread root). The reply goes into
the exact message's thread with the delivery ID as message metadata (event type
``ai_outfitter_delivery``); after an unknown outcome ``conversations.replies`` is paged
to find it again (recovery ``lookup``). Slack has no reply anchors: a thread reply is
a new Task in the same context.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import attrs
import httpx
import trio
from trio_websocket import ConnectionClosed, HandshakeError, WebSocketConnection, open_websocket_url

from taskplane.actors.native import Recovery
from taskplane.actors.outbound import DeliveryFailed, ProviderRejected
from taskplane.backoff import backoff
from taskplane.errors import Refused, TaskplaneError
from taskplane.model.types import Part
from taskplane.settings import SlackSettings
from taskplane.sources.base import Event, Result, Sender, SourceContext
from taskplane.sources.identity import source_identifier
from taskplane.sources.slack_api import (
    DEFAULT_API_URL,
    TIMEOUT_S,
    SlackApi,
    SlackRateLimited,
    SlackRejected,
    SlackUnavailable,
)

log = logging.getLogger("taskplane.sources.slack")

NAME = "slack"
METADATA_EVENT = "ai_outfitter_delivery"
RECONNECT_FIRST_S = 1.0
RECONNECT_CAP_S = 30.0


class _Reconnect(Exception):
    """The server asked for a new connection (``disconnect`` envelope)."""


def retry_later(exc: BaseException) -> bool:
    """The Slack source's one provider-error decision: ``True`` leaves the envelope
    unacknowledged, so Slack delivers it again (the plane answered anything but
    :class:`~taskplane.errors.Refused`, or the reaction met an unavailable or rate
    limiting Slack); ``False`` is a permanent outcome (the event is refused with
    evidence, or its reaction is given up with a log line), acknowledged."""
    if isinstance(exc, DeliveryFailed):
        return exc.__cause__ is None or retry_later(exc.__cause__)
    if isinstance(exc, SlackUnavailable | SlackRateLimited):
        return True
    if isinstance(exc, Refused | ProviderRejected):
        return False
    return isinstance(exc, TaskplaneError)  # transient, or a fault of the plane


@attrs.define(eq=False)
class SlackSource:
    """The Slack Socket Mode source; see the module docstring."""

    app_token: str
    bot_token: str
    api_url: str = DEFAULT_API_URL
    allowed_channels: frozenset[str] = frozenset()
    handled_reaction: str | None = None
    name: str = NAME
    recovery: Recovery = "lookup"
    supports_anchors: bool = False
    _api: SlackApi | None = None
    _bot_user: str = ""

    @classmethod
    def from_settings(cls, settings: SlackSettings) -> SlackSource:
        """The source ``settings`` describe: ``SLACK_APP_TOKEN`` and
        ``SLACK_BOT_TOKEN`` (required), ``SLACK_API_URL``, ``SLACK_ALLOWED_CHANNELS``
        (channel IDs), ``SLACK_HANDLED_REACTION`` (an emoji name).

        Raises:
            ValueError: a token is not set (the message names both).
        """
        if not settings.app_token or not settings.bot_token:
            raise ValueError("the slack source needs SLACK_APP_TOKEN and SLACK_BOT_TOKEN")
        return cls(
            app_token=settings.app_token,
            bot_token=settings.bot_token,
            api_url=settings.api_url,
            allowed_channels=frozenset(settings.allowed_channels),
            handled_reaction=settings.handled_reaction or None,
        )

    async def run(
        self, ctx: SourceContext, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Authenticate and connect (failures before ``started`` are start failures),
        then serve envelopes, reconnecting as needed, until cancelled."""
        async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
            api = SlackApi(client, self.api_url)
            auth = await api.call("auth.test", self.bot_token)
            team, self._bot_user = str(auth["team_id"]), str(auth["user_id"])
            principal = source_identifier("slack", team)
            self._api = api
            started = False
            delays = backoff(RECONNECT_FIRST_S, RECONNECT_CAP_S)
            delay = next(delays)
            try:
                while True:
                    try:
                        opened = await api.call("apps.connections.open", self.app_token)
                        async with open_websocket_url(str(opened["url"])) as ws:
                            if not started:
                                task_status.started()
                                started = True
                            await self._serve(ctx, ws, principal, team)
                    except _Reconnect:
                        delays = backoff(RECONNECT_FIRST_S, RECONNECT_CAP_S)
                        delay = next(delays)
                        continue
                    except (ConnectionClosed, HandshakeError, OSError, SlackUnavailable) as exc:
                        if not started:
                            raise
                        log.warning(
                            "slack connection lost (%r); reconnecting in %.0f s",
                            exc,
                            delay,
                            extra={"event": "source_reconnecting", "source": self.name},
                        )
                    except ProviderRejected as exc:
                        if not started:
                            raise
                        log.warning("%s", exc, extra={"event": "source_reconnecting"})
                    await trio.sleep(delay)
                    delay = next(delays)
            finally:
                self._api = None

    async def _serve(
        self, ctx: SourceContext, ws: WebSocketConnection, principal: str, team: str
    ) -> None:
        while True:
            raw = await ws.get_message()
            try:
                frame = json.loads(raw)
                if not isinstance(frame, dict):
                    raise ValueError("a frame must be a JSON object")
            except ValueError as exc:
                await ctx.evidence("malformed", {"error": str(exc), "frame": str(raw)[:500]})
                continue
            kind = frame.get("type")
            if kind == "hello":
                continue
            if kind == "disconnect":
                raise _Reconnect(str(frame.get("reason")))
            envelope_id = frame.get("envelope_id")
            if not isinstance(envelope_id, str) or not envelope_id:
                await ctx.evidence("malformed", {"error": "no envelope_id", "type": str(kind)})
                continue
            if await self._handle(ctx, frame, principal, team):
                await ws.send_message(json.dumps({"envelope_id": envelope_id}))

    async def _handle(
        self, ctx: SourceContext, frame: dict[str, Any], principal: str, team: str
    ) -> bool:
        """Make the envelope's outcome durable; ``True`` if it may be acknowledged."""
        payload = _object(frame.get("payload"))
        event = _object(payload.get("event"))
        channel = str(event.get("channel", "-"))
        if frame.get("type") != "events_api":
            return await self._count(ctx, principal, team, channel, f"envelope-{frame.get('type')}")
        direct = event.get("type") == "message" and event.get("channel_type") == "im"
        if event.get("type") != "app_mention" and not direct:
            return await self._count(ctx, principal, team, channel, "not-a-mention")
        if direct and event.get("subtype"):
            return await self._count(ctx, principal, team, channel, "message-subtype")
        if self.allowed_channels and channel not in self.allowed_channels:
            return await self._count(ctx, principal, team, channel, "channel-not-allowed")
        if event.get("user") == self._bot_user or event.get("bot_id"):
            return await self._count(ctx, principal, team, channel, "own-message")
        fields = (payload.get("event_id"), event.get("channel"), event.get("ts"), event.get("text"))
        if not all(isinstance(f, str) and f for f in fields):
            await ctx.evidence(
                "malformed",
                {"envelopeId": str(frame.get("envelope_id")), "error": "missing event fields"},
            )
            return True
        ts = str(event["ts"])
        root = str(event.get("thread_ts") or ts)
        user = str(event.get("user", "unknown"))
        where = "a direct message" if direct else f"<#{channel}>"
        work = Event(
            principal=principal,
            identity=(str(payload["event_id"]),),
            conversation=(team, channel, root),
            parts=(Part(text=f"Slack message from <@{user}> in {where}:\n{event['text']}"),),
            locator={"team": team, "channel": channel, "ts": ts, "threadTs": root, "user": user},
        )
        try:
            task_id = await ctx.ingest(work)
        except TaskplaneError as exc:
            if retry_later(exc):
                return False  # not recorded (transient, or a fault): not acknowledged
            # permanent: acknowledged with evidence
            await ctx.evidence("refused", {"eventId": str(payload["event_id"]), "error": str(exc)})
            return True
        return await self._handled(ctx, task_id, channel, ts)

    async def _handled(self, ctx: SourceContext, task_id: str, channel: str, ts: str) -> bool:
        """The ``SLACK_HANDLED_REACTION`` on the accepted message (if set); ``False``
        when it failed transiently (the envelope stays unacknowledged)."""
        if not self.handled_reaction:
            return True
        body = {"channel": channel, "timestamp": ts, "name": self.handled_reaction}

        async def react() -> str:
            if self._api is None:
                raise ProviderRejected("the slack source is not connected")
            try:
                await self._api.call("reactions.add", self.bot_token, body=body)
            except SlackRejected as exc:
                if exc.error != "already_reacted":
                    raise
            return f"{channel}/{ts}:{self.handled_reaction}"

        try:
            await ctx.deliver(task_id, f"handled:{channel}/{ts}", json.dumps(body), react)
        except Exception as exc:
            if retry_later(exc):
                return False
            log.warning(
                "the handled reaction on %s/%s was refused: %s",
                channel,
                ts,
                exc,
                extra={"event": "source_ack_failed", "source": self.name},
            )
        return True

    async def _count(
        self, ctx: SourceContext, principal: str, team: str, channel: str, classification: str
    ) -> bool:
        checkpoint = await ctx.load_checkpoint(principal)
        state: dict[str, Any] = dict(checkpoint) if isinstance(checkpoint, dict) else {}
        counters: dict[str, int] = dict(state.get("nonWork", {}))
        key = f"{team}/{channel}/{classification}"
        counters[key] = counters.get(key, 0) + 1
        await ctx.save_checkpoint(principal, {**state, "nonWork": counters})
        return True

    def sender(self, result: Result) -> Sender:
        """Reply in the exact thread; lookup by the delivery ID in message metadata."""
        channel, root = result.locator["channel"], result.locator["threadTs"]
        delivery_id = result.delivery.delivery_id

        def api() -> SlackApi:
            if self._api is None:
                raise ProviderRejected("the slack source is not connected")
            return self._api

        async def send() -> str:
            body = {
                "channel": channel,
                "thread_ts": root,
                "text": result.text,
                "metadata": {
                    "event_type": METADATA_EVENT,
                    "event_payload": {"delivery_id": delivery_id},
                },
            }
            answer = await api().call("chat.postMessage", self.bot_token, body=body)
            return str(answer["ts"])

        async def reconcile() -> str | None:
            cursor = ""
            for _ in range(50):
                params = {"channel": channel, "ts": root, "include_all_metadata": "true"}
                if cursor:
                    params["cursor"] = cursor
                answer = await api().call("conversations.replies", self.bot_token, params=params)
                for message in answer.get("messages", []):
                    meta = message.get("metadata") or {}
                    mine = message.get("user") == self._bot_user
                    payload = meta.get("event_payload") or {}
                    if mine and payload.get("delivery_id") == delivery_id:
                        return str(message["ts"])
                cursor = str((answer.get("response_metadata") or {}).get("next_cursor") or "")
                if not cursor:
                    return None
            return None

        return Sender(send=send, reconcile=reconcile)


def _object(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
