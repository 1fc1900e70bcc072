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
with the same backoff; alerts that fire while it is down are not seen.

The result has no provider reply target (an alert is not a message): it stays in the
Task, and its delivery records the occurrence key as the provider response ID, without a
provider call (recovery: provider-event dedupe on the occurrence key, so ``idempotent``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import attrs
import httpx
import trio

from taskplane.actors.native import Recovery
from taskplane.backoff import backoff
from taskplane.errors import Refused, TaskplaneError
from taskplane.model.types import Part
from taskplane.settings import JmapCalendarSettings
from taskplane.sources.base import Event, Result, Sender, SourceContext
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
from taskplane.sources.retained import take_retained

log = logging.getLogger("taskplane.sources.jmap_calendar")

NAME = "jmap-calendar"
RETRY_FIRST_S = 1.0
RETRY_CAP_S = 30.0
EVENT_PROPERTIES = ("id", "uid", "title", "description", "start", "duration", "timeZone")


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
                            delays = backoff(RETRY_FIRST_S, RETRY_CAP_S)
                            continue
                        await self._retained(ctx, api, session, principal, alert)
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
        value = await ctx.load_checkpoint(principal)
        state = dict(value) if isinstance(value, dict) else {}
        counters = dict(state.get("nonWork", {}))
        counters[kind] = counters.get(kind, 0) + 1
        await ctx.save_checkpoint(principal, {**state, "nonWork": counters})

    def sender(self, result: Result) -> Sender:
        """No provider call: the result stays in the Task; the occurrence key is the
        response ID (recovery: dedupe on the occurrence key)."""
        key = "@".join(
            v for v in (result.locator.get("uid"), result.locator.get("recurrenceId")) if v
        )

        async def send() -> str:
            return f"occurrence:{key}"

        return Sender(send=send)
