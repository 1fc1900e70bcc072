"""JMAP calendar alerts (conformance matrix, "JMAP calendar" row; JMAP for Calendars).

At start the session resource (``JMAP_CALENDAR_SESSION_URL``, with the email source's
credentials ``JMAP_USERNAME``/``JMAP_PASSWORD`` or ``JMAP_TOKEN``) names the primary
calendars account (``urn:ietf:params:jmap:calendars``) and the push EventSource, which
is opened (``types=*``); a failure there is a start failure.

Each ``CalendarAlert`` push object of that account (``calendarEventId``, ``uid``,
``recurrenceId``, ``alertId``) is handled in order: its event is read
(``CalendarEvent/get`` of the exact ID), and the occurrence becomes a Task: dedupe key
``event:`` + h(UID) for a single event, h(UID, recurrence ID) for an occurrence of a
recurring one, so every occurrence is its own Task and a second alert of the same
occurrence (or the same alert pushed again) is the same Task; no conversation key
(each occurrence a fresh context). An alert whose event is gone (``notFound``) is
counted as non-work (``event-gone``) in the checkpoint; one that cannot be read gets
``source.evidence`` (``malformed``); one the plane refuses permanently, ``refused``.

There is no replay cursor (the calendar event itself is the durable schedule) and no
acknowledgement: a transient failure (the server unavailable or rate limiting, the
agent's queue full) retries the retained alert with backoff (1 s doubling to 30 s, or
the rate limit's wait) before the next push is read. A dropped EventSource reconnects
with the same backoff.

Catching up (the calendar is the durable schedule): each time the EventSource opens,
before its first push is read, the alerts that fell due since the last moment the
source was known connected are computed from the events themselves
(``CalendarEvent/query`` with ``expandRecurrences`` over the window, then
``CalendarEvent/get`` of the occurrences' ``alerts``; the due rule is
:func:`~taskplane.sources.jmap_calendar_due.due_alerts`) and each due occurrence is
taken through the same path as a pushed alert, so one already taken is a duplicate of
the same Task. That moment (``connectedAt``, Unix ms) is saved in the checkpoint after
the catch-up's alerts and after each pushed alert are accepted; the very first start
only records it. Bounds: :data:`~taskplane.sources.jmap_calendar_due.MAX_LOOKBACK_S`
back, :data:`MAX_CAUGHT_UP` occurrences (earliest first, the rest logged as
``source_catchup_truncated``).

The result has no provider reply target (an alert is not a message): it stays in the
Task, and its delivery records the occurrence key as the provider response ID, without a
provider call (recovery: provider-event dedupe on the occurrence key, so ``idempotent``).
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
from taskplane.backoff import backoff
from taskplane.errors import Refused, TaskplaneError
from taskplane.model.types import Part
from taskplane.settings import JmapCalendarSettings
from taskplane.sources.base import Event, Result, Sender, SourceContext, load_state
from taskplane.sources.identity import native_value, source_identifier
from taskplane.sources.jmap_api import (
    CALENDAR_USING,
    CALENDARS,
    TIMEOUT_S,
    JmapApi,
    JmapRateLimited,
    JmapRejected,
    JmapUnavailable,
    Session,
    auth_headers,
)
from taskplane.sources.jmap_calendar_due import (
    MAX_OFFSET_S,
    Window,
    catch_up_window,
    due_alerts,
    ms_utc,
)
from taskplane.sources.retained import take_retained

log = logging.getLogger("taskplane.sources.jmap_calendar")

NAME = "jmap-calendar"
RETRY_FIRST_S = 1.0
RETRY_CAP_S = 30.0
EVENT_PROPERTIES = ("id", "uid", "title", "description", "start", "duration", "timeZone")
ALERT_PROPERTIES = ("id", "uid", "recurrenceId", "start", "duration", "timeZone", "alerts")
MAX_CAUGHT_UP = 256


def retry_later(exc: BaseException) -> bool:
    """The calendar source's one provider-error decision: ``True`` keeps the retained
    alert and retries it (the server is unavailable or rate limits, or the plane
    answered anything but :class:`~taskplane.errors.Refused`); ``False`` is a permanent
    outcome (a refusal by the server or the plane: evidence)."""
    if isinstance(exc, JmapUnavailable | JmapRateLimited):
        return True
    if isinstance(exc, Refused | JmapRejected):
        return False
    return isinstance(exc, TaskplaneError)  # transient, or a fault of the plane


@attrs.frozen
class Alert:
    """One ``CalendarAlert`` push object, read.

    Attributes:
        account_id, event_id, uid, alert_id: its fields (opaque provider strings).
        recurrence_id: the occurrence's recurrence ID, ``""`` for a single event.
    """

    account_id: str
    event_id: str
    uid: str
    alert_id: str
    recurrence_id: str = ""

    @property
    def occurrence(self) -> tuple[str, ...]:
        """The occurrence's identity fields: the UID, and the recurrence ID if any."""
        return (self.uid, self.recurrence_id) if self.recurrence_id else (self.uid,)

    @property
    def key(self) -> str:
        """The occurrence key as text: ``<uid>`` or ``<uid>@<recurrence ID>``."""
        return "@".join(self.occurrence)


def parse_alert(value: Mapping[str, Any]) -> Alert:
    """The :class:`Alert` of a ``CalendarAlert`` object.

    Raises:
        ValueError: a field is missing or not a non-empty string (``recurrenceId``
            may be ``null``).
    """
    recurrence = value.get("recurrenceId")
    return Alert(
        account_id=native_value(value.get("accountId"), "accountId"),
        event_id=native_value(value.get("calendarEventId"), "calendarEventId"),
        uid=native_value(value.get("uid"), "uid"),
        alert_id=native_value(value.get("alertId"), "alertId"),
        recurrence_id="" if recurrence is None else native_value(recurrence, "recurrenceId"),
    )


def alert_event(principal: str, alert: Alert, event: Mapping[str, Any]) -> Event:
    """The :class:`Event` of one occurrence (its parts depend on the occurrence and the
    calendar event only, so a second alert of it is the same event)."""
    title = str(event.get("title") or "(untitled)")
    start = alert.recurrence_id or str(event.get("start") or "")
    zone = str(event.get("timeZone") or "floating time")
    lines = [f"Calendar alert: {title}", f"Starts: {start} ({zone})"]
    if event.get("duration"):
        lines.append(f"Duration: {event['duration']}")
    if event.get("description"):
        lines.append(str(event["description"]))
    locator = {"accountId": alert.account_id, "calendarEventId": alert.event_id, "uid": alert.uid}
    if alert.recurrence_id:
        locator["recurrenceId"] = alert.recurrence_id
    return Event(
        principal=principal,
        identity=alert.occurrence,
        conversation=(),
        parts=(Part(text="\n".join(lines)),),
        locator=locator,
    )


@attrs.define(eq=False)
class JmapCalendarSource:
    """The JMAP calendar-alert source; see the module docstring."""

    session_url: str
    headers: Mapping[str, str] = attrs.field(repr=False)
    username: str = ""
    name: str = NAME
    recovery: Recovery = "idempotent"
    supports_anchors: bool = False
    clock: Callable[[], float] = attrs.field(default=time.time, repr=False)

    @classmethod
    def from_settings(cls, settings: JmapCalendarSettings) -> JmapCalendarSource:
        """The source ``settings`` describe: ``JMAP_CALENDAR_SESSION_URL`` and the
        ``JMAP_*`` credentials (a token, or a user name and password).

        Raises:
            ValueError: the session URL or a credential is missing.
        """
        creds = settings.credentials
        token = creds.token if creds else None
        username = creds.username if creds else None
        password = creds.password if creds else None
        if not settings.session_url or not (token or (username and password)):
            raise ValueError(
                "the jmap-calendar source needs JMAP_CALENDAR_SESSION_URL and JMAP_TOKEN, "
                "or JMAP_USERNAME and JMAP_PASSWORD"
            )
        headers = auth_headers(username, password, token)
        return cls(settings.session_url, headers, username or "")

    async def run(
        self, ctx: SourceContext, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Read the session and open the EventSource (failures before ``started`` are
        start failures), then take alerts, reconnecting as needed, until cancelled."""
        async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
            api = JmapApi(client, self.headers)
            session = await api.session(self.session_url, CALENDARS)
            user = session.username or self.username or session.account_id
            principal = source_identifier("jmap-calendar", self.session_url, user)
            started = False
            delays = backoff(RETRY_FIRST_S, RETRY_CAP_S)
            while True:
                try:
                    async for alert in api.calendar_alerts(session):
                        if alert is None:  # the stream is open
                            if not started:
                                task_status.started()
                                started = True
                            await self._catch_up(ctx, api, session, principal)
                            delays = backoff(RETRY_FIRST_S, RETRY_CAP_S)
                            continue
                        received_ms = self._now_ms()
                        await self._retained(ctx, api, session, principal, alert)
                        await self._update(ctx, principal, {"connectedAt": received_ms})
                    raise JmapUnavailable("the EventSource ended")
                except (JmapUnavailable, JmapRejected) as exc:
                    if not started:
                        raise
                    delay = exc.wait_s if isinstance(exc, JmapRateLimited) else next(delays)
                    log.warning(
                        "jmap-calendar EventSource lost (%s); reconnecting in %.0f s",
                        exc,
                        delay,
                        extra={"event": "source_reconnecting", "source": self.name},
                    )
                    await trio.sleep(delay)

    async def _retained(
        self,
        ctx: SourceContext,
        api: JmapApi,
        session: Session,
        principal: str,
        value: Mapping[str, Any],
    ) -> None:
        """Take one alert until its outcome is durable, retrying a transient failure."""
        await take_retained(
            lambda: self.take(ctx, api, session, principal, value),
            retry_later=retry_later,
            delays=backoff(RETRY_FIRST_S, RETRY_CAP_S),
            wait_of=lambda exc: exc.wait_s if isinstance(exc, JmapRateLimited) else None,
            log=log,
            what="calendar alert",
            source=self.name,
        )

    async def take(
        self,
        ctx: SourceContext,
        api: JmapApi,
        session: Session,
        principal: str,
        value: Mapping[str, Any],
    ) -> None:
        """Read the alert's event and accept its occurrence (or count or refuse it).

        Raises:
            an error :func:`retry_later` keeps (nothing durable changed).
        """
        try:
            alert = parse_alert(value)
        except ValueError as exc:
            await ctx.evidence("malformed", {"error": str(exc)})
            return
        get = {"accountId": alert.account_id, "ids": [alert.event_id]}
        call = ("CalendarEvent/get", {**get, "properties": list(EVENT_PROPERTIES)}, "e")
        try:
            answer = await api.call(session, [call], CALENDAR_USING)
        except JmapRejected as exc:
            if isinstance(exc, JmapRateLimited):
                raise
            await ctx.evidence("refused", {"uid": alert.uid, "error": str(exc)})
            return
        found = answer.get("e", {}).get("list") or []
        if not found:
            await self._count(ctx, principal, "event-gone")
            return
        try:
            await ctx.ingest(alert_event(principal, alert, found[0]))
        except TaskplaneError as exc:
            if retry_later(exc):
                raise
            await ctx.evidence("refused", {"occurrence": alert.key, "error": str(exc)})

    async def _count(self, ctx: SourceContext, principal: str, kind: str) -> None:
        state = await load_state(ctx, principal)
        counters = dict(state.get("nonWork", {}))
        counters[kind] = counters.get(kind, 0) + 1
        await ctx.save_checkpoint(principal, {**state, "nonWork": counters})

    async def _update(self, ctx: SourceContext, principal: str, fields: Mapping[str, Any]) -> None:
        state = await load_state(ctx, principal)
        await ctx.save_checkpoint(principal, {**state, **fields})

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    async def _catch_up(
        self, ctx: SourceContext, api: JmapApi, session: Session, principal: str
    ) -> None:
        """Take the alerts due since the checkpoint's ``connectedAt`` (the stream is
        open: a later one is pushed), then save the connection's moment.

        Raises:
            JmapUnavailable, JmapRateLimited: the server could not answer (the
            caller reconnects, and the next connection catches up again).
        """
        now_ms = self._now_ms()
        window = catch_up_window((await load_state(ctx, principal)).get("connectedAt"), now_ms)
        if window is not None:
            try:
                pushes = await self.due_pushes(api, session, window)
            except JmapRejected as exc:
                if isinstance(exc, JmapRateLimited):
                    raise
                since = ms_utc(window.since_ms)
                await ctx.evidence("refused", {"catchUpSince": since, "error": str(exc)})
                pushes = []
            for push in pushes:
                await self._retained(ctx, api, session, principal, push)
            if pushes:
                log.info(
                    "jmap-calendar caught up on %d alerts due while disconnected",
                    len(pushes),
                    extra={"event": "source_caught_up", "source": self.name},
                )
        await self._update(ctx, principal, {"connectedAt": now_ms})

    async def due_pushes(
        self, api: JmapApi, session: Session, window: Window
    ) -> list[dict[str, Any]]:
        """The ``CalendarAlert`` push objects of the alerts due in ``window``, earliest
        first, at most :data:`MAX_CAUGHT_UP`: one request of ``CalendarEvent/query``
        (``expandRecurrences``, the events within ``MAX_OFFSET_S`` of the window) and
        ``CalendarEvent/get`` of its ``#ids``. An occurrence's ``calendarEventId`` is
        the ID the query lists (an expanded instance's own ID).

        Raises:
            JmapMethodError, JmapRateLimited, JmapRejected, JmapUnavailable.
        """
        margin_ms = int(MAX_OFFSET_S * 1000)
        query = {
            "accountId": session.account_id,
            "filter": {
                "after": ms_utc(window.since_ms - margin_ms),
                "before": ms_utc(window.until_ms + margin_ms),
            },
            "sort": [{"property": "start", "isAscending": True}],
            "expandRecurrences": True,
            "limit": MAX_CAUGHT_UP,
            "calculateTotal": True,
        }
        get = {
            "accountId": session.account_id,
            "#ids": {"resultOf": "q", "name": "CalendarEvent/query", "path": "/ids"},
            "properties": list(ALERT_PROPERTIES),
        }
        answer = await api.call(
            session,
            [("CalendarEvent/query", query, "q"), ("CalendarEvent/get", get, "g")],
            CALENDAR_USING,
        )
        due: list[tuple[int, str, dict[str, Any]]] = []
        for event in answer.get("g", {}).get("list") or []:
            found = due_alerts(event, window) if isinstance(event, Mapping) else []
            for alert in found[:1]:  # one take per occurrence: its earliest due alert
                push = {
                    "@type": "CalendarAlert",
                    "accountId": session.account_id,
                    "calendarEventId": event.get("id"),
                    "uid": event.get("uid"),
                    "recurrenceId": event.get("recurrenceId"),
                    "alertId": alert.alert_id,
                }
                due.append((alert.at_ms, str(event.get("id")), push))
        total = answer.get("q", {}).get("total")
        if len(due) > MAX_CAUGHT_UP or (isinstance(total, int) and total > MAX_CAUGHT_UP):
            log.warning(
                "jmap-calendar catch-up: more than %d occurrences in the window; later "
                "ones are not taken",
                MAX_CAUGHT_UP,
                extra={"event": "source_catchup_truncated", "source": self.name},
            )
        due.sort(key=lambda d: (d[0], d[1]))
        return [push for _, _, push in due[:MAX_CAUGHT_UP]]

    def sender(self, result: Result) -> Sender:
        """No provider call: the result stays in the Task; the occurrence key is the
        response ID (recovery: dedupe on the occurrence key)."""
        key = "@".join(
            v for v in (result.locator.get("uid"), result.locator.get("recurrenceId")) if v
        )

        async def send() -> str:
            return f"occurrence:{key}"

        return Sender(send=send)
