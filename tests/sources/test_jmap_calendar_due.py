"""When a calendar alert is due, and the window a (re)connection catches up: the
JSCalendar triggers (offset from start or end, absolute), time zones, acknowledged
alerts, the look-back bound and the very first start."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from taskplane.sources.jmap_calendar_due import (
    MAX_LOOKBACK_S,
    Due,
    Window,
    catch_up_window,
    due_alerts,
    ms_utc,
    parse_duration,
    utc_ms,
)

HOUR_MS = 3600 * 1000
NINE_UTC = utc_ms("2026-12-02T09:00:00Z")


def _event(**fields: Any) -> dict[str, Any]:
    return {"id": "e1", "uid": "u1", "start": "2026-12-02T09:00:00", **fields}


def _offset(offset: str, relative_to: str | None = None) -> dict[str, Any]:
    trigger: dict[str, Any] = {"@type": "OffsetTrigger", "offset": offset}
    if relative_to is not None:
        trigger["relativeTo"] = relative_to
    return {"@type": "Alert", "trigger": trigger}


def test_durations_are_the_signed_jscalendar_ones() -> None:
    assert parse_duration("PT15M") == timedelta(minutes=15)
    assert parse_duration("-PT15M") == timedelta(minutes=-15)
    assert parse_duration("+P1DT2H") == timedelta(days=1, hours=2)
    assert parse_duration("P1W") == timedelta(weeks=1)
    assert parse_duration("PT0S") == timedelta(0)
    for bad in ("P", "PT", "15M", "-P1H", 15, None):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_utc_date_times_round_trip_in_whole_seconds() -> None:
    assert ms_utc(NINE_UTC) == "2026-12-02T09:00:00Z"
    assert ms_utc(NINE_UTC + 999) == "2026-12-02T09:00:00Z"
    with pytest.raises(ValueError):
        utc_ms("2026-12-02T09:00:00")  # a local date-time is not UTC


def test_an_offset_alert_is_due_before_the_start_in_the_events_time_zone() -> None:
    window = Window(NINE_UTC - 2 * HOUR_MS, NINE_UTC)
    berlin = _event(timeZone="Europe/Berlin", alerts={"a1": _offset("-PT15M")})
    # 09:00 in Berlin is 08:00 UTC: due 07:45 UTC, inside the window
    assert due_alerts(berlin, window) == [Due("a1", NINE_UTC - HOUR_MS - 15 * 60 * 1000)]
    floating = _event(alerts={"a1": _offset("-PT15M")})  # no time zone: read as UTC
    assert due_alerts(floating, window) == [Due("a1", NINE_UTC - 15 * 60 * 1000)]


def test_the_window_is_open_at_its_start_and_closed_at_its_end() -> None:
    event = _event(alerts={"a1": _offset("PT0S")})
    assert due_alerts(event, Window(NINE_UTC - 1, NINE_UTC)) == [Due("a1", NINE_UTC)]
    assert due_alerts(event, Window(NINE_UTC, NINE_UTC + HOUR_MS)) == []


def test_an_alert_relative_to_the_end_adds_the_duration() -> None:
    event = _event(duration="PT1H", alerts={"end": _offset("PT5M", "end")})
    window = Window(NINE_UTC, NINE_UTC + 2 * HOUR_MS)
    assert due_alerts(event, window) == [Due("end", NINE_UTC + HOUR_MS + 5 * 60 * 1000)]


def test_an_absolute_alert_is_due_at_its_time_and_several_are_earliest_first() -> None:
    alerts = {
        "late": {
            "@type": "Alert",
            "trigger": {"@type": "AbsoluteTrigger", "when": ms_utc(NINE_UTC)},
        },
        "early": _offset("-PT30M"),
    }
    window = Window(NINE_UTC - HOUR_MS, NINE_UTC)
    assert due_alerts(_event(alerts=alerts), window) == [
        Due("early", NINE_UTC - 30 * 60 * 1000),
        Due("late", NINE_UTC),
    ]


def test_acknowledged_unreadable_and_unknown_alerts_are_not_due() -> None:
    window = Window(NINE_UTC - HOUR_MS, NINE_UTC)
    dismissed = {**_offset("-PT15M"), "acknowledged": "2026-12-02T08:50:00Z"}
    acked_before = {**_offset("-PT15M"), "acknowledged": "2026-12-01T08:50:00Z"}
    alerts = {
        "dismissed": dismissed,
        "acked-before": acked_before,  # acknowledged an earlier firing: due again
        "bad-offset": _offset("15 minutes"),
        "unknown": {"@type": "Alert", "trigger": {"@type": "UnknownTrigger"}},
        "no-trigger": {"@type": "Alert"},
        "relative-to-what": _offset("-PT15M", "middle"),
    }
    assert due_alerts(_event(alerts=alerts), window) == [
        Due("acked-before", NINE_UTC - 15 * 60 * 1000)
    ]
    assert due_alerts(_event(alerts={"a": _offset("-PT1M")}, timeZone="Mars/Olympus"), window) == []
    assert due_alerts(_event(start=None, alerts={"a": _offset("-PT1M")}), window) == []
    assert due_alerts(_event(), window) == []  # no alerts at all


def test_the_catch_up_window_starts_at_the_last_connection_at_most_a_day_back() -> None:
    now = NINE_UTC
    assert catch_up_window(now - HOUR_MS, now) == Window(now - HOUR_MS, now)
    lookback = int(MAX_LOOKBACK_S * 1000)
    assert catch_up_window(now - 3 * lookback, now) == Window(now - lookback, now)


def test_the_very_first_start_catches_up_nothing() -> None:
    assert catch_up_window(None, NINE_UTC) is None
    assert catch_up_window("yesterday", NINE_UTC) is None
    assert catch_up_window(True, NINE_UTC) is None
    assert catch_up_window(NINE_UTC, NINE_UTC) is None  # nothing between then and now
