"""Chatto over its public ConnectRPC API and realtime protocol (conformance matrix,
"Chatto" row).

At start ``ViewerService.GetViewer`` (``CHATTO_TOKEN``, a bot API key) names the
viewer; the realtime WebSocket (``/api/realtime``) is opened with ``hello`` and
``subscribe_events`` from the stored projection cursor. A failure there is a start
failure.

Work is the viewer's notifications: each ``notification_occurrences_replace``
operation of the projection stream carries the current occurrences, and those whose
signal is a direct message, a direct mention or a reply to the viewer are selected
(other kinds, and the viewer's own activity, are counted per kind in the checkpoint,
once per process: a replacement lists an occurrence until it is dismissed, so the
source remembers the last 4096 IDs it took or counted and skips them).
A selected occurrence is taken in order: ``NotificationService.GetNotificationOccurrence``
confirms it is still there (``not_found``: dismissed elsewhere, a permanent outcome
recorded as ``source.evidence``), ``MessageService.GetMessage`` reads the exact
message, and the event is accepted. After acceptance the notification is dismissed
(``DeleteNotificationOccurrence``, operation ``dismiss:<notification ID>``,
idempotent: ``deleted: false`` or ``not_found`` means already handled). Every other
permanent outcome is recorded as evidence first, then the notification is dismissed
directly (the same idempotent call; there is no Task to serialize it under), so it is
not taken again at every restart: its message gone (``dismissed-elsewhere``), a
message that is not text (a lone surrogate: ``malformed``), and a refusal by the plane
(``refused``: over the message limit, or the same notification again with a changed
message, ``DuplicateMessageId``, after a crash between acceptance and dismissal). An
occurrence whose IDs are not text cannot be named to Chatto: it is ``malformed``
evidence only.

Identity: principal ``chatto:`` + h(viewer ID); dedupe key ``event:`` +
h(notification ID); conversation ``conversation:`` + h(room ID, thread-root ID, which
is the message's own ID outside a thread). The checkpoint is the projection cursor
(``resume_cursor`` of each projection event, ``cursor`` of ``caught_up``), written only
once every selected notification of that event was accepted or durably refused: a
crash before that resumes from the cursor before it and the replay offers the
notification again, which the dedupe key makes harmless. The replacement holds one
bounded page, so once each subscription caught up the source also takes what every
page of ``ListNotificationOccurrences`` lists (oldest first). A transient failure (the
plane or Chatto unavailable, a rate limit) retries the retained occurrence, with
backoff, on the same connection. No continuation: a Task only completes or rejects.

The reply is one ``MessageService.CreateMessage`` in the activation message's room,
``in_reply_to`` that message and in its thread when it had one. Chatto has no
idempotency key and the source does no lookup, so the reply uses the ``ambiguous``
policy: an unknown outcome is never sent again automatically; a definite refusal is
retried. A dropped WebSocket reconnects with backoff (1 s doubling to 30 s), or after
the delay a server ``close`` asks for (a refused resume cursor is dropped first, so
the next subscription starts from a compacted reset); so does one that sends no frame (not even its
heartbeat) for three of the heartbeat intervals the server's ``hello`` announced.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator, Mapping
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
from taskplane.settings import ChattoSettings
from taskplane.sources.base import Event, Result, Sender, SourceContext, load_state
from taskplane.sources.chatto_api import (
    TIMEOUT_S,
    ChattoApi,
    ChattoNotFound,
    ChattoRateLimited,
    ChattoRejected,
    ChattoUnavailable,
)
from taskplane.sources.chatto_realtime import (
    ChattoCursorRefused,
    ChattoRealtimeRefused,
    open_session,
    read_frame,
    realtime_url,
    refusal,
)
from taskplane.sources.identity import source_identifier
from taskplane.sources.receipt import acknowledge
from taskplane.sources.retained import take_retained

log = logging.getLogger("taskplane.sources.chatto")

NAME = "chatto"
RETRY_FIRST_S = 1.0
RETRY_CAP_S = 30.0
SELECTED = frozenset({"directMessageReceived", "directMentionReceived", "replyReceived"})
"""The notification signal kinds (protobuf JSON names) that are work."""
MAX_REMEMBERED = 4096
"""Notification IDs this process remembers as taken (oldest forgotten first): a
later replacement that still lists one skips it."""
SWEEP_PAGE = 100
"""Notifications per ``ListNotificationOccurrences`` page of the catch-up sweep."""
MAX_SWEEP_PAGES = 20
"""Pages one catch-up sweep reads at most (2000 notifications)."""
SILENT_HEARTBEATS = 3
"""Heartbeat intervals without any frame after which the connection counts as lost."""


class ChattoSilent(Exception):
    """The realtime connection stayed silent past its heartbeats: it is opened again."""


def retry_later(exc: BaseException) -> bool:
    """The Chatto source's one provider-error decision: ``True`` keeps the retained
    occurrence and retries it on the same connection (Chatto is unavailable or rate
    limits, or the plane answered anything but :class:`~taskplane.errors.Refused`);
    ``False`` is a permanent outcome (evidence, or a dismissal given up with a log
    line)."""
    if isinstance(exc, DeliveryFailed):
        return exc.__cause__ is None or retry_later(exc.__cause__)
    if isinstance(exc, ChattoUnavailable | ChattoRateLimited):
        return True
    if isinstance(exc, Refused):
        return False
    return isinstance(exc, TaskplaneError)  # transient, or a fault of the plane


@attrs.frozen
class Notification:
    """One notification occurrence, read.

    Attributes:
        id: the stable occurrence ID.
        kind: the signal kind (protobuf JSON name, ``directMentionReceived``).
        room_id, event_id: the exact message it points at.
        thread_root_id: the message's thread root, or ``""`` outside a thread.
        room_name, actor_id, actor_name: display and classification values.
    """

    id: str
    kind: str
    room_id: str
    event_id: str
    thread_root_id: str = ""
    room_name: str = ""
    actor_id: str = ""
    actor_name: str = ""

    @property
    def root_id(self) -> str:
        """The conversation's thread root: the thread's, else the message's own ID."""
        return self.thread_root_id or self.event_id


def parse_occurrence(value: Mapping[str, Any]) -> Notification:
    """The :class:`Notification` of a ``NotificationOccurrence`` (protobuf JSON).

    Raises:
        ValueError: no ID, an unknown or empty signal, or no room/message reference.
    """
    ident = value.get("id")
    signal = value.get("signal")
    if not isinstance(ident, str) or not ident or not isinstance(signal, dict) or not signal:
        raise ValueError("an occurrence needs an id and a signal")
    kind, body = next(iter(signal.items()))
    ref = body.get("message") if isinstance(body, dict) else None
    room = ref.get("room") if isinstance(ref, dict) else None
    if not isinstance(ref, dict) or not isinstance(room, dict):
        raise ValueError(f"occurrence {ident}: its signal names no message")
    room_id, event_id = room.get("id"), ref.get("eventId")
    if not isinstance(room_id, str) or not room_id or not isinstance(event_id, str) or not event_id:
        raise ValueError(f"occurrence {ident}: its message reference lacks a room or event ID")
    raw_actor = value.get("actor")
    actor: Mapping[str, Any] = raw_actor if isinstance(raw_actor, dict) else {}
    return Notification(
        id=ident,
        kind=str(kind),
        room_id=room_id,
        event_id=event_id,
        thread_root_id=str(ref.get("threadRootEventId") or ""),
        room_name=str(room.get("name") or ""),
        actor_id=str(actor.get("id") or ""),
        actor_name=str(actor.get("displayName") or actor.get("login") or ""),
    )


def occurrences_of(event: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The occurrences of every ``notification_occurrences_replace`` operation of one
    projection event, in order."""
    found: list[Mapping[str, Any]] = []
    for op in event.get("operations") or []:
        replace = op.get("notificationOccurrencesReplace") if isinstance(op, dict) else None
        page = replace.get("occurrences") if isinstance(replace, dict) else None
        if isinstance(page, dict):
            found.extend(o for o in page.get("occurrences") or [] if isinstance(o, dict))
    return found


def classify(notification: Notification, viewer_id: str) -> str:
    """``work``, or the non-work classification: ``own-activity`` or the signal kind."""
    if notification.actor_id and notification.actor_id == viewer_id:
        return "own-activity"
    return "work" if notification.kind in SELECTED else notification.kind


def _check_text(values: tuple[object, ...], what: str) -> None:
    """Raises ValueError naming ``what`` when a string of ``values`` is not text (a
    lone surrogate from an ``\\ud800`` escape cannot be encoded as UTF-8)."""
    for value in values:
        if isinstance(value, str):
            try:
                value.encode()
            except UnicodeEncodeError:
                raise ValueError(f"{what} holds a lone surrogate (not UTF-8 text)") from None


def _printable(text: str) -> str:
    """``text`` with every lone surrogate escaped, safe to record and log."""
    return text.encode(errors="backslashreplace").decode()


def notification_event(principal: str, notification: Notification, body: str) -> Event:
    """The :class:`Event` of a selected notification whose message reads ``body``.

    Its parts hold only what identifies the event's content (the author's and the
    room's stable IDs and the body): display names, which a rename changes, stay out,
    so the notification replayed after a rename is the same payload (matrix, "Chatto":
    a changed payload is a permanent outcome)."""
    where = notification.room_id
    author = notification.actor_id or "someone"
    return Event(
        principal=principal,
        identity=(notification.id,),
        conversation=(notification.room_id, notification.root_id),
        parts=(Part(text=f"Chatto message from user {author} in room {where}:\n{body}"),),
        locator={
            "notificationId": notification.id,
            "roomId": notification.room_id,
            "eventId": notification.event_id,
            "threadRootId": notification.thread_root_id,
        },
    )


@attrs.define(eq=False)
class ChattoSource:
    """The Chatto source; see the module docstring."""

    url: str
    token: str = attrs.field(repr=False)
    name: str = NAME
    recovery: Recovery = "ambiguous"
    supports_anchors: bool = False
    _api: ChattoApi | None = None
    _viewer: str = ""
    _taken: dict[str, None] = attrs.field(factory=dict)
    _counted: dict[str, int] = attrs.field(factory=dict)
    _evidenced: dict[str, None] = attrs.field(factory=dict)
    """Notifications whose evidence this process recorded (a retried dismissal does
    not record it again); bounded like ``_taken``."""

    @classmethod
    def from_settings(cls, settings: ChattoSettings) -> ChattoSource:
        """The source ``settings`` describe: ``CHATTO_URL`` and ``CHATTO_TOKEN``.

        Raises:
            ValueError: the URL or the token is not set (the message names both).
        """
        if not settings.url or not settings.token:
            raise ValueError("the chatto source needs CHATTO_URL and CHATTO_TOKEN")
        return cls(settings.url, settings.token)

    async def run(
        self, ctx: SourceContext, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Name the viewer and subscribe (failures before ``started`` are start
        failures), then serve the projection stream, reconnecting, until cancelled."""
        async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
            api = ChattoApi(client, self.url, self.token)
            viewer = await api.call("ViewerService", "GetViewer", {})
            profile = (viewer.get("user") or {}).get("profile") or {}
            if not isinstance(profile.get("id"), str) or not profile["id"]:
                raise ChattoUnavailable("GetViewer answered no viewer ID")
            self._viewer = profile["id"]
            principal = source_identifier("chatto", self._viewer)
            self._api = api
            started = False
            delays = backoff(RETRY_FIRST_S, RETRY_CAP_S)
            try:
                while True:
                    try:
                        state = await load_state(ctx, principal)
                        async with open_websocket_url(realtime_url(self.url)) as ws:
                            session = await open_session(ws, self.token, state.get("cursor"))
                            if not started:
                                task_status.started()
                                started = True
                            delays = backoff(RETRY_FIRST_S, RETRY_CAP_S)
                            await self._serve(ctx, ws, principal, session.heartbeat_s)
                    except (
                        ConnectionClosed,
                        HandshakeError,
                        OSError,
                        ChattoRejected,
                        ChattoUnavailable,
                        ChattoRealtimeRefused,
                        ChattoSilent,
                    ) as exc:
                        if isinstance(exc, ChattoCursorRefused):
                            await self._forget_cursor(ctx, principal)
                        await self._reconnect_wait(exc, started, delays)
            finally:
                self._api = None

    async def _forget_cursor(self, ctx: SourceContext, principal: str) -> None:
        """Drop a resume cursor the server refused: the next subscription starts from a
        compacted reset, which lists every notification still there."""
        state = await load_state(ctx, principal)
        state.pop("cursor", None)
        await ctx.save_checkpoint(principal, state)

    async def _reconnect_wait(self, exc: Exception, started: bool, delays: Iterator[float]) -> None:
        if not started and not isinstance(exc, ChattoCursorRefused):
            raise exc
        asked = exc.retry_after_s if isinstance(exc, ChattoRealtimeRefused) else None
        if isinstance(exc, ChattoRateLimited):
            asked = exc.wait_s
        delay = asked if asked is not None else next(delays)
        log.warning(
            "chatto connection lost (%r); reconnecting in %.0f s",
            exc,
            delay,
            extra={"event": "source_reconnecting", "source": self.name},
        )
        await trio.sleep(delay)

    async def _serve(
        self, ctx: SourceContext, ws: WebSocketConnection, principal: str, heartbeat_s: float
    ) -> None:
        """Take the frames of one connection in order.

        Raises:
            ChattoSilent: no frame for :data:`SILENT_HEARTBEATS` heartbeat intervals.
            ChattoRealtimeRefused: the server sent ``close`` or a fatal ``error``.
        """
        silent_s = heartbeat_s * SILENT_HEARTBEATS if heartbeat_s else math.inf
        swept = False
        while True:
            frame: dict[str, Any] | None = None
            with trio.move_on_after(silent_s):
                frame = await read_frame(ws)
            if frame is None:
                raise ChattoSilent(f"no realtime frame for {silent_s:.0f} s")
            refused = refusal(frame)
            if refused is not None:
                raise refused
            if "caughtUp" in frame:
                if not swept:
                    await self._sweep(ctx, principal)
                    swept = True
                await self._advance(ctx, principal, str(frame["caughtUp"].get("cursor") or ""))
                continue
            event = frame.get("projectionEvent")
            if not isinstance(event, dict):
                continue  # heartbeat, pong, transient events, a non-fatal error
            for value in occurrences_of(event):
                await self._offer(ctx, principal, value, str(event.get("id", "")))
            await self._advance(ctx, principal, str(event.get("resumeCursor") or ""))

    async def _sweep(self, ctx: SourceContext, principal: str) -> None:
        """Once a subscription caught up, take the notifications beyond the
        replacement's bounded page: every page of ``ListNotificationOccurrences``
        (at most :data:`MAX_SWEEP_PAGES`), oldest first.

        Raises:
            ChattoUnavailable, ChattoRejected: the listing failed (the connection is
                opened again and the sweep repeated).
        """
        found: list[Mapping[str, Any]] = []
        for page in range(MAX_SWEEP_PAGES):
            answer = await self._connected().call(
                "NotificationService",
                "ListNotificationOccurrences",
                {"page": {"limit": SWEEP_PAGE, "offset": page * SWEEP_PAGE}},
            )
            found.extend(o for o in answer.get("occurrences") or [] if isinstance(o, dict))
            if not (answer.get("page") or {}).get("hasMore"):
                break
        else:
            log.warning(
                "chatto lists more than %d notifications; the oldest wait for a later sweep",
                MAX_SWEEP_PAGES * SWEEP_PAGE,
                extra={"event": "source_poll_failed", "source": self.name},
            )
        for value in reversed(found):  # the listing is newest first
            await self._offer(ctx, principal, value, "list")

    async def _offer(
        self, ctx: SourceContext, principal: str, value: Mapping[str, Any], where: str
    ) -> None:
        """Take one listed occurrence (``where``: the projection event ID or
        ``list``), unless this process took or counted it already."""
        try:
            notification = parse_occurrence(value)
            _check_text(attrs.astuple(notification), "the occurrence")
        except ValueError as exc:
            await ctx.evidence("malformed", {"error": _printable(str(exc)), "event": where})
            return
        if notification.id in self._taken:
            return  # still listed in a later replacement: taken already
        kind = classify(notification, self._viewer)
        if kind == "work":
            await self._retained(ctx, principal, notification)
        else:
            self._counted[kind] = self._counted.get(kind, 0) + 1
        self._remember(notification.id)

    def _remember(self, notification_id: str) -> None:
        self._taken[notification_id] = None
        while len(self._taken) > MAX_REMEMBERED:
            del self._taken[next(iter(self._taken))]

    async def _advance(self, ctx: SourceContext, principal: str, cursor: str) -> None:
        """Store ``cursor`` (every selected notification before it is taken) with the
        non-work counts seen since the last write."""
        state = await load_state(ctx, principal)
        counters = dict(state.get("nonWork", {}))
        for kind, n in self._counted.items():
            counters[kind] = counters.get(kind, 0) + n
        value = {**state, "nonWork": counters, **({"cursor": cursor} if cursor else {})}
        if value != state:
            await ctx.save_checkpoint(principal, value)
        self._counted = {}

    async def _retained(
        self, ctx: SourceContext, principal: str, notification: Notification
    ) -> None:
        """Take ``notification`` until its outcome is durable, retrying a transient
        failure with backoff on the same connection."""
        await take_retained(
            lambda: self.take(ctx, principal, notification),
            retry_later=retry_later,
            delays=backoff(RETRY_FIRST_S, RETRY_CAP_S),
            wait_of=lambda exc: exc.wait_s if isinstance(exc, ChattoRateLimited) else None,
            log=log,
            what=f"chatto notification {notification.id}",
            source=self.name,
        )

    async def take(self, ctx: SourceContext, principal: str, notification: Notification) -> None:
        """Accept or record one selected notification, then dismiss it.

        Raises:
            an error :func:`retry_later` keeps: nothing durable changed for the
                notification beyond what a retry repeats harmlessly.
        """
        api = self._connected()
        ident = {"notificationId": notification.id}
        try:
            await api.call("NotificationService", "GetNotificationOccurrence", ident)
        except ChattoNotFound as exc:
            await ctx.evidence("dismissed-elsewhere", {**ident, "error": _printable(str(exc))})
            return  # the notification itself is gone: nothing to dismiss
        try:
            found = await api.call(
                "MessageService",
                "GetMessage",
                {"roomId": notification.room_id, "eventId": notification.event_id},
            )
        except ChattoNotFound as exc:
            await self._set_aside(ctx, notification, "dismissed-elsewhere", str(exc))
            return
        body = str((found.get("message") or {}).get("body") or "")
        try:
            _check_text((body,), "the message body")
        except ValueError as exc:
            await self._set_aside(ctx, notification, "malformed", str(exc))
            return
        try:
            task_id = await ctx.ingest(notification_event(principal, notification, body))
        except TaskplaneError as exc:
            if retry_later(exc):
                raise
            await self._set_aside(ctx, notification, "refused", str(exc))
            return
        await self._dismiss(ctx, task_id, notification)

    async def _set_aside(
        self, ctx: SourceContext, notification: Notification, classification: str, error: str
    ) -> None:
        """Record the permanent outcome ``classification`` of ``notification`` (once
        per process), then dismiss it directly: idempotent, so a retry after a
        transient failure repeats it harmlessly.

        Raises:
            ChattoUnavailable, ChattoRateLimited: the dismissal's outcome is unknown
                (the retained occurrence retries it); a refusal is logged once.
        """
        if notification.id not in self._evidenced:
            record: dict[str, object] = {
                "notificationId": notification.id,
                "error": _printable(error)[:500],
            }
            await ctx.evidence(classification, record)
            self._evidenced[notification.id] = None
            while len(self._evidenced) > MAX_REMEMBERED:
                del self._evidenced[next(iter(self._evidenced))]
        try:
            await self._connected().call(
                "NotificationService",
                "DeleteNotificationOccurrence",
                {"notificationId": notification.id},
            )
        except ChattoNotFound:
            pass  # already dismissed
        except ChattoRejected as exc:
            if retry_later(exc):
                raise
            log.warning(
                "the dismissal of notification %s was refused: %s",
                notification.id,
                exc,
                extra={"event": "source_ack_failed", "source": self.name},
            )

    async def _dismiss(self, ctx: SourceContext, task_id: str, notification: Notification) -> None:
        body = {"notificationId": notification.id}

        async def dismiss() -> str:
            try:
                answer = await self._connected().call(
                    "NotificationService", "DeleteNotificationOccurrence", body
                )
            except ChattoNotFound:
                return "already-handled"
            return "deleted" if answer.get("deleted") else "already-handled"

        await acknowledge(
            ctx,
            task_id,
            f"dismiss:{notification.id}",
            json.dumps(body),
            dismiss,
            retry_later=retry_later,
            log=log,
            what=f"the dismissal of notification {notification.id}",
            source=self.name,
        )

    def _connected(self) -> ChattoApi:
        if self._api is None:
            raise ProviderRejected("the chatto source is not connected")
        return self._api

    def sender(self, result: Result) -> Sender:
        """One message replying to the exact activation message, in its thread when
        it had one (``ambiguous`` policy)."""
        body: dict[str, Any] = {
            "roomId": result.locator["roomId"],
            "body": result.text,
            "inReplyTo": result.locator["eventId"],
        }
        if result.locator.get("threadRootId"):
            body["threadRootEventId"] = result.locator["threadRootId"]

        async def send() -> str:
            answer = await self._connected().call("MessageService", "CreateMessage", body)
            return str((answer.get("message") or {}).get("id") or "")

        return Sender(send=send)
