"""The JMAP calendar-alert source in process: reading ``CalendarAlert`` objects, the
occurrence identity, the event it builds, the retry decision, the settings, and the
retained-alert retry against a mock server (``httpx.MockTransport``) in virtual time."""

from __future__ import annotations

import json
from typing import Any

import attrs
import httpx
import pytest
import trio
import trio.testing

from taskplane.errors import DuplicateMessageId, Overloaded, PayloadTooLarge
from taskplane.settings import load_sources
from taskplane.sources.jmap_api import (
    CALENDARS,
    JmapApi,
    JmapRateLimited,
    JmapRejected,
    JmapUnavailable,
    auth_headers,
    calendar_alert,
)
from taskplane.sources.jmap_calendar import (
    Alert,
    JmapCalendarSource,
    alert_event,
    parse_alert,
    retry_later,
)
from tests.support.source_context import RecordingContext

SESSION_URL = "https://jmap.example.com/.well-known/jmap"
ACCOUNT = "c7e2"


def _push(**fields: Any) -> dict[str, Any]:
    body = {
        "@type": "CalendarAlert",
        "accountId": ACCOUNT,
        "calendarEventId": "e1",
        "uid": "uid-1",
        "recurrenceId": "2026-12-02T10:00:00",
        "alertId": "a1",
    }
    return {**body, **fields}


def test_a_calendar_alert_is_read_from_the_push_channel_of_its_account() -> None:
    assert calendar_alert(json.dumps(_push()), ACCOUNT) == _push()
    assert calendar_alert(json.dumps(_push()), "other") is None
    assert calendar_alert(json.dumps({"@type": "StateChange", "changed": {}}), ACCOUNT) is None
    assert calendar_alert("not json", ACCOUNT) is None
    alert = parse_alert(_push())
    assert alert == Alert(ACCOUNT, "e1", "uid-1", "a1", "2026-12-02T10:00:00")
    assert parse_alert(_push(recurrenceId=None)).recurrence_id == ""
    with pytest.raises(ValueError, match="uid"):
        parse_alert(_push(uid=""))
    with pytest.raises(ValueError, match="recurrenceId"):
        parse_alert(_push(recurrenceId=7))


def test_every_occurrence_has_its_own_identity_and_no_conversation() -> None:
    single = parse_alert(_push(recurrenceId=None))
    recurring = parse_alert(_push())
    other_alert = parse_alert(_push(alertId="a2"))
    assert single.occurrence == ("uid-1",) and single.key == "uid-1"
    assert recurring.occurrence == ("uid-1", "2026-12-02T10:00:00")
    event = {"title": "Standup", "timeZone": "Europe/Berlin", "description": "daily"}
    built = alert_event("jmap-calendar:x", recurring, event)
    assert built.identity == recurring.occurrence and built.conversation == ()
    assert built.locator == {
        "accountId": ACCOUNT,
        "calendarEventId": "e1",
        "uid": "uid-1",
        "recurrenceId": "2026-12-02T10:00:00",
    }
    assert built.parts[0].text == (
        "Calendar alert: Standup\nStarts: 2026-12-02T10:00:00 (Europe/Berlin)\ndaily"
    )
    assert alert_event("jmap-calendar:x", other_alert, event) == built  # same occurrence


@pytest.mark.parametrize(
    ("error", "later"),
    [
        (JmapUnavailable("503"), True),
        (JmapRateLimited(5), True),
        (Overloaded("full"), True),
        (JmapRejected("HTTP 403"), False),
        (PayloadTooLarge("big"), False),
        (DuplicateMessageId("other payload"), False),
        (RuntimeError("a bug"), False),
    ],
)
def test_the_retry_decision_is_one_function(error: Exception, later: bool) -> None:
    assert retry_later(error) is later


def test_settings_need_the_session_url_and_share_the_email_credentials() -> None:
    record = load_sources({"OUTFITTER_CHANNELS": "jmap-calendar", "JMAP_TOKEN": "t"})
    assert record.jmap_calendar is not None
    with pytest.raises(ValueError, match="JMAP_CALENDAR_SESSION_URL"):
        JmapCalendarSource.from_settings(record.jmap_calendar)
    detected = load_sources(
        {"JMAP_CALENDAR_SESSION_URL": SESSION_URL, "JMAP_USERNAME": "u", "JMAP_PASSWORD": "p"}
    )
    assert detected.selected == ("jmap-calendar",) and detected.jmap_calendar is not None
    source = JmapCalendarSource.from_settings(detected.jmap_calendar)
    assert source.headers == auth_headers("u", "p", None) and source.recovery == "idempotent"
    no_password = load_sources({"JMAP_CALENDAR_SESSION_URL": SESSION_URL, "JMAP_USERNAME": "u"})
    assert no_password.jmap_calendar is not None
    with pytest.raises(ValueError, match="JMAP_PASSWORD"):
        JmapCalendarSource.from_settings(no_password.jmap_calendar)


async def test_the_result_stays_in_the_task_under_its_occurrence_key() -> None:
    source = JmapCalendarSource(SESSION_URL, {})
    result: Any = attrs.make_class("R", ["locator"])({"uid": "u", "recurrenceId": "r"})
    assert await source.sender(result).send() == "occurrence:u@r"


def _server(answers: list[httpx.Response | None]) -> httpx.MockTransport:
    session = {
        "capabilities": {"urn:ietf:params:jmap:core": {}, CALENDARS: {}},
        "primaryAccounts": {CALENDARS: ACCOUNT},
        "username": "ada",
        "apiUrl": "/api/",
        "eventSourceUrl": "/eventsource/?types={types}&closeafter={closeafter}&ping={ping}",
    }

    def handle(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, json=session)
        body = json.loads(request.content)
        assert body["using"] == ["urn:ietf:params:jmap:core", CALENDARS]
        canned = answers.pop(0) if answers else None
        if canned is not None:
            return canned
        ids = body["methodCalls"][0][1]["ids"]
        found = [{"id": i, "uid": "uid-1", "title": "Standup"} for i in ids if i != "gone"]
        result = {"accountId": ACCOUNT, "list": found, "notFound": []}
        return httpx.Response(200, json={"methodResponses": [["CalendarEvent/get", result, "e"]]})

    return httpx.MockTransport(handle)


async def test_a_transient_failure_retries_the_retained_alert_with_backoff(
    autojump_clock: trio.testing.MockClock,
) -> None:
    answers: list[httpx.Response | None] = [
        httpx.Response(503),
        httpx.Response(429, headers={"Retry-After": "7"}),
    ]
    source = JmapCalendarSource(SESSION_URL, {})
    ctx = RecordingContext(refuse=[Overloaded("full")])
    async with httpx.AsyncClient(transport=_server(answers)) as client:
        api = JmapApi(client, {})
        session = await api.session(SESSION_URL, CALENDARS)
        await source._retained(ctx, api, session, "jmap-calendar:x", _push())
        assert [round(t) for t, _ in ctx.events] == [10]  # 1 s, then 7 s (Retry-After), then 2 s
        await source._retained(ctx, api, session, "jmap-calendar:x", _push(calendarEventId="gone"))
        await source._retained(ctx, api, session, "jmap-calendar:x", _push(uid=""))
    assert ctx.checkpoint == {"nonWork": {"event-gone": 1}}
    assert ctx.evidence_kinds == ["malformed"]


NOW_S = 1_796_202_000.0  # 2026-12-02T09:00:00Z
NOW_MS = int(NOW_S * 1000)


def _catch_up_server(events: list[dict[str, Any]], calls: list[str]) -> httpx.MockTransport:
    """A calendars server whose query over the window lists ``events`` (already
    expanded occurrences) and whose get answers any of them by ID."""
    session = {
        "capabilities": {"urn:ietf:params:jmap:core": {}, CALENDARS: {}},
        "primaryAccounts": {CALENDARS: ACCOUNT},
        "apiUrl": "/api/",
        "eventSourceUrl": "/eventsource/?types={types}&closeafter={closeafter}&ping={ping}",
    }
    by_id = {e["id"]: e for e in events}

    def handle(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, json=session)
        responses: list[Any] = []
        listed: list[str] = []
        for name, args, call_id in json.loads(request.content)["methodCalls"]:
            calls.append(name)
            if name == "CalendarEvent/query":
                assert args["expandRecurrences"] is True
                calls.append(json.dumps(args["filter"], sort_keys=True))
                assert args["sort"] == [{"property": "start", "isAscending": True}]
                ordered = sorted(events, key=lambda e: str(e["start"]))
                ids = listed = [e["id"] for e in ordered][: args["limit"]]
                body = {"accountId": ACCOUNT, "ids": ids, "total": len(events), "position": 0}
            else:
                ids = args["ids"] if "ids" in args else listed  # "#ids": the query's
                body = {"accountId": ACCOUNT, "list": [by_id[i] for i in ids], "notFound": []}
            responses.append([name, body, call_id])
        return httpx.Response(200, json={"methodResponses": responses})

    return httpx.MockTransport(handle)


def _occurrence(
    event_id: str, recurrence_id: str | None, start: str, offset: str
) -> dict[str, Any]:
    trigger = {"@type": "OffsetTrigger", "offset": offset}
    return {
        "id": event_id,
        "uid": "uid-standup",
        "recurrenceId": recurrence_id,
        "title": "Standup",
        "start": start,
        "timeZone": "Etc/UTC",
        "alerts": {"a1": {"@type": "Alert", "trigger": trigger}},
    }


async def _catch_up(
    events: list[dict[str, Any]], checkpoint: object
) -> tuple[RecordingContext, list[str]]:
    calls: list[str] = []
    source = JmapCalendarSource(SESSION_URL, {}, clock=lambda: NOW_S)
    ctx = RecordingContext(checkpoint=checkpoint)
    async with httpx.AsyncClient(transport=_catch_up_server(events, calls)) as client:
        api = JmapApi(client, {})
        session = await api.session(SESSION_URL, CALENDARS)
        await source._catch_up(ctx, api, session, "jmap-calendar:x")
    return ctx, calls


async def test_a_reconnection_takes_each_occurrence_due_since_the_last_connection() -> None:
    events = [
        _occurrence("e1;1", "2026-12-02T08:30:00", "2026-12-02T08:30:00", "-PT5M"),  # due 08:25
        _occurrence("e1;2", "2026-12-02T08:50:00", "2026-12-02T08:50:00", "-PT5M"),  # due 08:45
        _occurrence("e1;3", "2026-12-02T07:00:00", "2026-12-02T07:00:00", "-PT5M"),  # before
        _occurrence("e1;4", "2026-12-02T09:30:00", "2026-12-02T09:30:00", "-PT5M"),  # not yet
    ]
    ctx, calls = await _catch_up(events, {"connectedAt": NOW_MS - 3600 * 1000, "nonWork": {"x": 1}})
    window = '{"after": "2026-11-25T08:00:00Z", "before": "2026-12-09T09:00:00Z"}'
    assert calls[:3] == ["CalendarEvent/query", window, "CalendarEvent/get"]  # a week's margin
    taken = [event.identity for _, event in ctx.events]
    assert taken == [
        ("uid-standup", "2026-12-02T08:30:00"),
        ("uid-standup", "2026-12-02T08:50:00"),
    ]  # the same identity a pushed alert of the occurrence has: a second take is a duplicate
    assert calls[3:] == ["CalendarEvent/get", "CalendarEvent/get"]  # the pushed alert's path
    assert ctx.checkpoint == {"connectedAt": NOW_MS, "nonWork": {"x": 1}}


async def test_the_very_first_start_asks_nothing_and_records_its_moment() -> None:
    events = [_occurrence("e1", None, "2026-12-02T08:50:00", "-PT5M")]
    ctx, calls = await _catch_up(events, None)
    assert calls == [] and ctx.events == []
    assert ctx.checkpoint == {"connectedAt": NOW_MS}


async def test_the_catch_up_reaches_back_a_day_and_takes_at_most_its_count() -> None:
    day_ago = "2026-12-01T08:00:00"  # 25 h ago, a day's look-back does not reach it
    events = [_occurrence("old", None, day_ago, "PT0S")]
    events += [
        _occurrence(f"e;{i}", f"r{i:03}", f"2026-12-02T08:{i // 60:02}:{i % 60:02}", "PT0S")
        for i in range(300)
    ]
    ctx, _ = await _catch_up(events[::-1], {"connectedAt": NOW_MS - 30 * 3600 * 1000})
    taken = [event.identity[1] for _, event in ctx.events]
    # the query lists the 256 earliest (the old one among them, not due in a day's
    # look-back): the rest are not asked for, and what is taken is earliest first
    assert taken == [f"r{i:03}" for i in range(255)]


async def test_a_refused_catch_up_is_evidence_and_an_unavailable_one_is_tried_again() -> None:
    refusal = {"methodResponses": [["error", {"type": "invalidArguments"}, "q"]]}
    answers: list[httpx.Response | None] = [httpx.Response(503), httpx.Response(200, json=refusal)]
    source = JmapCalendarSource(SESSION_URL, {}, clock=lambda: NOW_S)
    before = {"connectedAt": NOW_MS - 60_000}
    ctx = RecordingContext(checkpoint=before)
    async with httpx.AsyncClient(transport=_server(answers)) as client:
        api = JmapApi(client, {})
        session = await api.session(SESSION_URL, CALENDARS)
        with pytest.raises(JmapUnavailable):  # the caller reconnects and catches up again
            await source._catch_up(ctx, api, session, "jmap-calendar:x")
        assert ctx.checkpoint == before
        await source._catch_up(ctx, api, session, "jmap-calendar:x")
    assert ctx.evidence_kinds == ["refused"] and ctx.events == []
    assert ctx.checkpoint == {"connectedAt": NOW_MS}
