"""A fake JMAP calendars server on 127.0.0.1 for the calendar-alert source: the session
resource (``GET /.well-known/jmap``, a primary ``urn:ietf:params:jmap:calendars``
account), method calls (``POST /api/``: ``CalendarEvent/get``, with ``notFound`` and
the ``#ids`` back-reference of a ``CalendarEvent/query`` in the same request, and
``CalendarEvent/query`` with the ``after``/``before`` filter, ``expandRecurrences``,
``sort`` by ``start``, ``limit`` and ``calculateTotal``), and the push EventSource
(``GET /eventsource/``) carrying ``CalendarAlert`` push objects (``{"@type":
"CalendarAlert", "accountId", "calendarEventId", "uid", "recurrenceId", "alertId"}``)
and pings. HTTP Basic or a bearer token. Faults: ``429`` with ``Retry-After`` and
``503`` answers to method calls, dropped streams, a push channel that refuses to open
(``503``).

Recurrence: an event with ``recurrenceRules`` ``[{"@type": "RecurrenceRule",
"frequency": "daily", "count": n}]`` expands (``expandRecurrences``) into instances of
ID ``<id>;<recurrence ID>`` with that ``recurrenceId`` and ``start``, no rules; their
``CalendarEvent/get`` answers the instance. Local date-times are read as UTC (the fake
knows no time zones).
"""

from __future__ import annotations

import base64
import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from tests.e2e.fake_http import JsonHandler, LoopbackServer

USERNAME, PASSWORD, TOKEN = "ada@example.com", "calendar-app-password", "cal-token"
ACCOUNT = "c7e2"
CALENDARS = "urn:ietf:params:jmap:calendars"


class FakeJmapCalendar:
    """Start with :meth:`start`; ``session_url`` is for ``JMAP_CALENDAR_SESSION_URL``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.events: dict[str, dict[str, Any]] = {}
        self.pushed: list[dict[str, Any]] = []
        self.gets: list[list[str]] = []
        self.queries: list[dict[str, Any]] = []
        self.stream_down = False
        self.rate_limit_s = 0
        self.unavailable = 0
        self.streams_opened = 0
        self.generation = 0
        self.closed = False
        handler = type("Handler", (_Handler,), {"fake": self})
        self.http = LoopbackServer(handler)
        self.url = self.http.url
        self.session_url = f"{self.url}/.well-known/jmap"

    def start(self) -> FakeJmapCalendar:
        self.http.start()
        return self

    def close(self) -> None:
        self.closed = True
        self.drop_streams()
        self.http.close()

    def add_event(self, event_id: str, uid: str, title: str, **extra: Any) -> None:
        with self.lock:
            self.events[event_id] = {"id": event_id, "uid": uid, "title": title, **extra}

    def fire(
        self, event_id: str, uid: str, recurrence_id: str | None = None, alert: str = "a1"
    ) -> None:
        """Push one ``CalendarAlert`` to every open stream."""
        push = {
            "@type": "CalendarAlert",
            "accountId": ACCOUNT,
            "calendarEventId": event_id,
            "uid": uid,
            "recurrenceId": recurrence_id,
            "alertId": alert,
        }
        with self.lock:
            self.pushed.append(push)
            self.changed.notify_all()

    def occurrences(self) -> list[dict[str, Any]]:
        """Every event, recurring ones expanded into their instances (under the lock)."""
        out: list[dict[str, Any]] = []
        for event in self.events.values():
            rules = event.get("recurrenceRules") or []
            if not rules or "start" not in event:
                out.append(event)
                continue
            first = datetime.fromisoformat(event["start"])
            base = {k: v for k, v in event.items() if k != "recurrenceRules"}
            for n in range(int(rules[0].get("count", 1))):
                start = (first + timedelta(days=n)).isoformat()
                out.append(
                    {**base, "id": f"{event['id']};{start}", "recurrenceId": start, "start": start}
                )
        return out

    def drop_streams(self) -> None:
        with self.lock:
            self.generation += 1
            self.changed.notify_all()

    def session(self) -> dict[str, Any]:
        return {
            "capabilities": {
                "urn:ietf:params:jmap:core": {"maxObjectsInGet": 256, "maxSizeRequest": 10_000_000},
                CALENDARS: {},
            },
            "accounts": {ACCOUNT: {"name": USERNAME, "accountCapabilities": {CALENDARS: {}}}},
            "primaryAccounts": {CALENDARS: ACCOUNT},
            "username": USERNAME,
            "apiUrl": f"{self.url}/api/",
            "downloadUrl": f"{self.url}/download/{{accountId}}/{{blobId}}/{{name}}",
            "uploadUrl": f"{self.url}/upload/{{accountId}}/",
            "eventSourceUrl": f"{self.url}/eventsource/?types={{types}}&closeafter={{closeafter}}"
            "&ping={ping}",
            "state": "s1",
        }


def _authorized(header: str | None) -> bool:
    basic = "Basic " + base64.b64encode(f"{USERNAME}:{PASSWORD}".encode()).decode()
    return header in (basic, f"Bearer {TOKEN}")


class _Handler(JsonHandler):
    fake: FakeJmapCalendar

    def content_type(self, status: int) -> str:
        return "application/problem+json" if status >= 400 else "application/json"

    def _problem(self, status: int, detail: str, **headers: str) -> None:
        self._send(status, {"type": "about:blank", "status": status, "detail": detail}, headers)

    def do_GET(self) -> None:
        if not _authorized(self.headers.get("Authorization")):
            return self._problem(401, "authentication required")
        path = urlsplit(self.path).path
        if path == "/.well-known/jmap":
            return self._send(200, self.fake.session())
        if path == "/eventsource/":
            return self._event_source()
        return self._problem(404, "not found")

    def do_POST(self) -> None:
        fake = self.fake
        length = int(self.headers.get("Content-Length") or 0)
        request = json.loads(self.rfile.read(length)) if length else {}
        if not _authorized(self.headers.get("Authorization")):
            return self._problem(401, "authentication required")
        with fake.lock:
            limited, fake.rate_limit_s = fake.rate_limit_s, 0
            unavailable = fake.unavailable > 0
            fake.unavailable = max(0, fake.unavailable - 1)
        if limited:
            return self._problem(429, "too many requests", **{"Retry-After": str(limited)})
        if unavailable:
            return self._problem(503, "try again later")
        if CALENDARS not in request.get("using", ()):
            return self._send(
                400, {"type": "urn:ietf:params:jmap:error:unknownCapability", "status": 400}
            )
        responses: list[list[Any]] = []
        listed: dict[str, list[str]] = {}
        for name, args, call_id in request["methodCalls"]:
            if args.get("accountId") != ACCOUNT:
                responses.append(["error", {"type": "accountNotFound"}, call_id])
            elif name == "CalendarEvent/query":
                body = _query(fake, args)
                listed[call_id] = body["ids"]
                responses.append([name, body, call_id])
            elif name == "CalendarEvent/get":
                reference = args.get("#ids")
                if reference is not None:  # RFC 8620 §3.7, the query's /ids only
                    ids = listed[reference["resultOf"]]
                else:
                    ids = list(args.get("ids") or [])
                    with fake.lock:
                        fake.gets.append(ids)
                with fake.lock:
                    known = {e["id"]: e for e in fake.occurrences()}
                found = [known[i] for i in ids if i in known]
                missing = [i for i in ids if i not in known]
                body = {"accountId": ACCOUNT, "state": "e1", "list": found, "notFound": missing}
                responses.append([name, body, call_id])
            else:
                responses.append(["error", {"type": "unknownMethod"}, call_id])
        return self._send(200, {"methodResponses": responses, "sessionState": "s1"})

    def _event_source(self) -> None:
        fake = self.fake
        if fake.stream_down:
            return self._problem(503, "push is unavailable")
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        with fake.lock:
            generation = fake.generation
            fake.streams_opened += 1
            sent = len(fake.pushed)
        try:
            while not fake.closed:
                with fake.lock:
                    fake.changed.wait(timeout=1.0)
                    if fake.generation != generation:
                        return None
                    new, sent = fake.pushed[sent:], len(fake.pushed)
                frames = [f"data: {json.dumps(push)}\n\n" for push in new]
                frames = frames or ['event: ping\ndata: {"interval": 1}\n\n']
                self.wfile.write("".join(frames).encode())
                self.wfile.flush()
        except OSError:
            return None
        return None


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text.removesuffix("Z")).replace(tzinfo=UTC)


def _query(fake: FakeJmapCalendar, args: dict[str, Any]) -> dict[str, Any]:
    """``CalendarEvent/query``: the events (instances when ``expandRecurrences``) that
    end after ``after`` and start before ``before``, by ``start``."""
    with fake.lock:
        fake.queries.append(args)
        events = fake.occurrences() if args.get("expandRecurrences") else list(fake.events.values())
    after, before = _utc(args["filter"]["after"]), _utc(args["filter"]["before"])
    kept = []
    for event in events:
        if "start" not in event:  # an event the test gave no time: never in a window
            continue
        start = _utc(event["start"])
        end = start  # durations are not read: every fake event is an instant
        if end > after and start < before:
            kept.append(event)
    kept.sort(key=lambda e: (e["start"], e["id"]))
    ids = [e["id"] for e in kept][: int(args.get("limit") or 256)]
    body: dict[str, Any] = {
        "accountId": ACCOUNT,
        "queryState": "q1",
        "canCalculateChanges": False,
        "position": 0,
        "ids": ids,
    }
    if args.get("calculateTotal"):
        body["total"] = len(kept)
    return body
