"""Which calendar alerts fell due in a window, from the calendar events themselves.

The push EventSource has no replay, but the calendar is the durable schedule: the
alerts that fired while taskplane was not connected can be computed from the events'
JSCalendar properties (RFC 8984, as JMAP for Calendars serves them). One rule decides
when an alert is due (:func:`due_alerts`), one the window caught up
(:func:`catch_up_window`).

An alert (an entry of the event's ``alerts`` map, keyed by its alert ID) is due at:

- an ``OffsetTrigger``: the occurrence's start (``relativeTo`` ``"start"``, the
  default) or end (``"end"``: the start plus ``duration``) plus the signed ``offset``
  (``"-PT15M"``: 15 minutes before). The start is the ``start`` local date-time in the
  event's ``timeZone`` (an IANA name); a floating event (no ``timeZone``) is read as UTC;
- an ``AbsoluteTrigger``: its ``when`` (a UTC date-time).

An alert whose ``acknowledged`` time is at or after its due time was dismissed by the
user and is not due; any other trigger type is not understood and not due.

Bounds (rule "Bad input is bounded the same way on every intake path"): the window
reaches back at most :data:`MAX_LOOKBACK_S` (older alerts are not caught up), and the
events asked for are those within :data:`MAX_OFFSET_S` of the window, so an alert more
than that from its occurrence (``"-P8D"``) is not caught up either.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs

MAX_LOOKBACK_S = 24 * 3600.0
MAX_OFFSET_S = 7 * 24 * 3600.0

_DURATION = re.compile(
    r"^(?P<sign>[+-])?P(?:(?P<w>\d+)W)?(?:(?P<d>\d+)D)?"
    r"(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$"
)


@attrs.frozen
class Window:
    """The alerts caught up: those due after ``since_ms``, up to and including
    ``until_ms`` (Unix milliseconds)."""

    since_ms: int
    until_ms: int


@attrs.frozen
class Due:
    """One alert due in a window: its ``alert_id`` and when it was due (``at_ms``)."""

    alert_id: str
    at_ms: int


def catch_up_window(connected_at_ms: object, now_ms: int) -> Window | None:
    """The window to catch up at a (re)connection at ``now_ms``: from the last moment
    the source was known connected (``connected_at_ms``, from its checkpoint), but at
    most :data:`MAX_LOOKBACK_S` back; ``None`` when there is no such moment (the very
    first start takes nothing older than itself) or it is not before ``now_ms``."""
    if not isinstance(connected_at_ms, int) or isinstance(connected_at_ms, bool):
        return None
    since = max(connected_at_ms, now_ms - int(MAX_LOOKBACK_S * 1000))
    return Window(since, now_ms) if since < now_ms else None


def parse_duration(text: object) -> timedelta:
    """A JSCalendar (signed) ``Duration``: ``"PT15M"``, ``"-PT1H"``, ``"P1DT2H"``, ``"P1W"``.

    Raises:
        ValueError: not a duration.
    """
    match = _DURATION.match(text) if isinstance(text, str) else None
    if match is None or text in ("P", "-P", "+P") or str(text).endswith("T"):
        raise ValueError(f"not a duration: {text!r}")
    parts = {k: float(v) for k, v in match.groupdict().items() if k != "sign" and v}
    value = timedelta(
        weeks=parts.get("w", 0),
        days=parts.get("d", 0),
        hours=parts.get("h", 0),
        minutes=parts.get("m", 0),
        seconds=parts.get("s", 0),
    )
    return -value if match["sign"] == "-" else value


def utc_ms(text: object) -> int:
    """A UTC date-time (``"2026-12-02T09:00:00Z"``) in Unix milliseconds.

    Raises:
        ValueError: not a UTC date-time.
    """
    if not isinstance(text, str) or not text.endswith("Z"):
        raise ValueError(f"not a UTC date-time: {text!r}")
    return int(datetime.fromisoformat(text[:-1]).replace(tzinfo=UTC).timestamp() * 1000)


def ms_utc(ms: int) -> str:
    """Unix milliseconds as a UTC date-time (``"2026-12-02T09:00:00Z"``, whole seconds)."""
    return datetime.fromtimestamp(ms // 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def occurrence_start(event: Mapping[str, Any]) -> datetime:
    """When an occurrence starts: its ``start`` local date-time in its ``timeZone``
    (UTC for a floating event), as an aware datetime.

    Raises:
        ValueError: ``start`` is not a local date-time, or the time zone is unknown.
    """
    start, zone = event.get("start"), event.get("timeZone")
    if not isinstance(start, str):
        raise ValueError("the event has no start")
    local = datetime.fromisoformat(start)
    if local.tzinfo is not None:
        raise ValueError(f"start is not a local date-time: {start!r}")
    try:
        return local.replace(tzinfo=ZoneInfo(zone) if isinstance(zone, str) else UTC)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown time zone {zone!r}") from exc


def due_alerts(event: Mapping[str, Any], window: Window) -> list[Due]:
    """The alerts of one occurrence (a single event, or one instance of a recurring
    event as the server expands it) that were due in ``window``, earliest first; an
    alert whose time cannot be read (a bad trigger, start, time zone or duration) is
    left out. See the module docstring for the rule.
    """
    alerts = event.get("alerts")
    if not isinstance(alerts, Mapping) or not alerts:
        return []
    due: list[Due] = []
    for alert_id, alert in alerts.items():
        if not isinstance(alert, Mapping) or not isinstance(alert.get("trigger"), Mapping):
            continue
        try:
            at_ms = _trigger_ms(event, alert["trigger"])
            acknowledged = alert.get("acknowledged")
            if at_ms is None or (acknowledged is not None and utc_ms(acknowledged) >= at_ms):
                continue
        except ValueError:
            continue
        if window.since_ms < at_ms <= window.until_ms:
            due.append(Due(str(alert_id), at_ms))
    return sorted(due, key=lambda d: (d.at_ms, d.alert_id))


def _trigger_ms(event: Mapping[str, Any], trigger: Mapping[str, Any]) -> int | None:
    kind = trigger.get("@type")
    if kind == "AbsoluteTrigger":
        return utc_ms(trigger.get("when"))
    if kind != "OffsetTrigger":
        return None
    at = occurrence_start(event)
    if trigger.get("relativeTo", "start") == "end":
        at += parse_duration(event.get("duration") or "PT0S")
    elif trigger.get("relativeTo", "start") != "start":
        return None
    return int((at + parse_duration(trigger.get("offset"))).timestamp() * 1000)
