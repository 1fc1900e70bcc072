"""The Forgejo source in process: the forge clock, the cursor and its revision set,
subjects, the retry decision, and a poll against a recorded-shape answer in virtual
time."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import attrs
import httpx
import pytest
import trio

from taskplane.actors.outbound import DeliveryFailed
from taskplane.errors import DuplicateMessageId, Overloaded, PayloadTooLarge
from taskplane.settings import load_sources
from taskplane.sources.base import Event
from taskplane.sources.forgejo import (
    Cursor,
    ForgejoSource,
    forge_time,
    retry_later,
    since_param,
    subject_of,
)
from taskplane.sources.forgejo_api import (
    ForgejoApi,
    ForgejoRateLimited,
    ForgejoRejected,
    ForgejoUnavailable,
)

URL = "https://forge.test"


def _thread(thread_id: int, updated: str, kind: str = "Issue", number: int = 3) -> dict[str, Any]:
    segment = "pulls" if kind == "Pull" else "issues"
    return {
        "id": thread_id,
        "repository": {"full_name": "acme/widgets"},
        "subject": {
            "title": "Broken build",
            "url": f"{URL}/api/v1/repos/acme/widgets/{segment}/{number}",
            "latest_comment_url": None,
            "type": kind,
        },
        "unread": True,
        "updated_at": updated,
    }


def test_the_forge_clock_is_read_in_any_offset_and_sent_back_in_utc() -> None:
    local = forge_time("2026-12-01T20:00:05+08:00")
    assert local == datetime(2026, 12, 1, 12, 0, 5, tzinfo=UTC)
    assert forge_time("2026-12-01T12:00:05Z") == local
    assert forge_time("yesterday") is None and forge_time("2026-12-01T12:00:05") is None
    assert since_param(local) == "2026-12-01T11:59:05Z"  # less the overlap


def test_the_cursor_keeps_only_revisions_within_the_overlap() -> None:
    cursor = Cursor()
    for key in ("1@2026-12-01T10:00:00Z", "2@2026-12-01T10:00:30Z", "3@2026-12-01T10:02:00Z"):
        updated = forge_time(key.partition("@")[2])
        assert updated is not None
        cursor = cursor.taken(key, updated)
    assert cursor.since == forge_time("2026-12-01T10:02:00Z")
    assert cursor.seen == {"3@2026-12-01T10:02:00Z"}
    again = Cursor.of(json.loads(json.dumps(cursor.value())))
    assert again == cursor
    older = forge_time("2026-12-01T10:01:30Z")
    assert older is not None
    assert cursor.taken("4@2026-12-01T10:01:30Z", older).since == cursor.since


def test_only_issue_and_pull_subjects_are_work() -> None:
    assert subject_of(_thread(1, "x")) == (
        "/api/v1/repos/acme/widgets/issues/3",
        "acme/widgets",
        "Issue",
        "3",
    )
    assert subject_of(_thread(1, "x", "Pull", 9)) is not None
    assert subject_of(_thread(1, "x", "Commit")) is None
    broken = _thread(1, "x")
    broken["subject"]["url"] = f"{URL}/somewhere/else"
    assert subject_of(broken) is None


def _failed(cause: Exception) -> DeliveryFailed:
    try:
        raise DeliveryFailed("mark-read") from cause
    except DeliveryFailed as exc:
        return exc


@pytest.mark.parametrize(
    ("error", "later"),
    [
        (ForgejoUnavailable("502"), True),
        (ForgejoRateLimited(3), True),
        (Overloaded("full"), True),
        (DeliveryFailed("mark-read"), True),
        (_failed(ForgejoUnavailable("502")), True),
        (_failed(ForgejoRejected(403, "no")), False),
        (ForgejoRejected(403, "no"), False),
        (PayloadTooLarge("big"), False),
        (DuplicateMessageId("changed"), False),
    ],
)
def test_the_retry_decision_is_one_function(error: Exception, later: bool) -> None:
    assert retry_later(error) is later


def test_settings_default_to_a_minute_and_no_mark_read() -> None:
    sources = load_sources({"FORGEJO_URL": URL, "FORGEJO_TOKEN": "t"})
    assert sources.selected == ("forgejo",) and sources.forgejo is not None
    source = ForgejoSource.from_settings(sources.forgejo)
    assert (source.poll_interval_s, source.mark_read) == (60.0, False)
    with pytest.raises(ValueError, match="FORGEJO_URL and FORGEJO_TOKEN"):
        record = load_sources({"OUTFITTER_CHANNELS": "forgejo", "FORGEJO_URL": URL}).forgejo
        assert record is not None
        ForgejoSource.from_settings(record)


@attrs.define
class Context:
    events: list[Event] = attrs.field(factory=list)
    refuse: list[Exception] = attrs.field(factory=list)
    evidence_records: list[str] = attrs.field(factory=list)
    checkpoint: object = None
    saves: int = 0

    async def ingest(self, event: Event) -> str:
        if self.refuse:
            raise self.refuse.pop(0)
        self.events.append(event)
        return "task"

    async def evidence(self, classification: str, record: dict[str, object]) -> None:
        self.evidence_records.append(classification)

    async def deliver(self, *args: object, **kwargs: object) -> str:
        raise AssertionError("mark-read is off")

    async def load_checkpoint(self, principal: str) -> object:
        return self.checkpoint

    async def save_checkpoint(self, principal: str, value: object) -> None:
        self.checkpoint, self.saves = value, self.saves + 1


async def test_a_poll_takes_each_revision_once_and_a_held_one_keeps_the_cursor(
    autojump_clock: trio.testing.MockClock,
) -> None:
    threads = [
        _thread(2, "2026-12-01T20:00:02+08:00", "Commit"),
        _thread(1, "2026-12-01T20:00:01+08:00"),
        _thread(3, "2026-12-01T20:00:03+08:00", number=4),
    ]
    sinces: list[str | None] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sinces.append(request.url.params.get("since"))
        return httpx.Response(200, json=threads)

    ctx = Context(refuse=[Overloaded("full")])
    source = ForgejoSource(URL, "t", poll_interval_s=60)
    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:
        api = ForgejoApi(client, URL, "t")
        assert await source.poll(ctx, api, "forgejo:x") == 1.0  # held: the backoff's first
        assert ctx.saves == 0 and ctx.events == []
        assert await source.poll(ctx, api, "forgejo:x") == 60
        assert await source.poll(ctx, api, "forgejo:x") == 60
    assert [e.locator["threadId"] for e in ctx.events] == ["1", "3"]
    assert ctx.evidence_records == ["non-work"]
    assert sinces == [None, None, "2026-12-01T11:59:03Z"]
    assert Cursor.of(ctx.checkpoint).since == forge_time("2026-12-01T12:00:03Z")
