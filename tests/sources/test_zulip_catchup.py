"""The Zulip catch-up in process, against a ``GET /api/v1/messages`` stand-in behind
``httpx.MockTransport``: paging by anchor, the registration's end, the page and age
bounds, and the source's checkpoint (the anchor at the first registration, the
pending catch-up kept through a held message and a rate limit, then cleared)."""

from __future__ import annotations

import json
import logging
from typing import Any

import attrs
import httpx
import pytest

from taskplane.errors import Overloaded
from taskplane.sources.zulip import ZulipSource
from taskplane.sources.zulip_api import ZulipApi, ZulipRateLimited
from taskplane.sources.zulip_catchup import MAX_AGE_S, MAX_PAGES, NUM_AFTER, catch_up
from tests.support.source_context import RecordingContext

BOT, ALICE = 9, 11
NOW_S = 1_800_000_000.0


def _message(n: int, **over: Any) -> dict[str, Any]:
    message = {
        "id": n,
        "sender_id": ALICE,
        "sender_full_name": "Alice",
        "type": "stream",
        "stream_id": 3,
        "display_recipient": "engineering",
        "subject": "deploys",
        "content": f"@**Task Bot** number {n}",
        "timestamp": int(NOW_S) - 60,
        "flags": ["mentioned"],
    }
    return {**message, **over}


@attrs.define
class Server:
    """``GET /messages`` (anchor, ``num_after``, ``include_anchor``) and
    ``POST /register`` over ``messages``, as Zulip answers them."""

    messages: list[dict[str, Any]]
    reads: list[dict[str, str]] = attrs.field(factory=list)
    limited: int = 0  # the next reads answered 429
    registered: int = 0

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/api/v1/register":
            self.registered += 1
            newest = max((m["id"] for m in self.messages), default=-1)
            body = {"queue_id": f"q{self.registered}", "last_event_id": -1}
            return _ok(**body, max_message_id=newest)
        if path.endswith("/reactions"):
            return _ok()
        assert path == "/api/v1/messages"
        args = dict(request.url.params)
        self.reads.append(args)
        if self.limited:
            self.limited -= 1
            error = {"result": "error", "msg": "limit", "code": "RATE_LIMIT_HIT"}
            return httpx.Response(429, headers={"Retry-After": "7"}, json=error)
        assert (args["include_anchor"], args["num_before"], args["narrow"]) == ("false", "0", "[]")
        assert args["apply_markdown"] == "false"
        anchor, num_after = int(args["anchor"]), int(args["num_after"])
        newer = sorted((m for m in self.messages if m["id"] > anchor), key=lambda m: m["id"])
        listed = newer[:num_after]
        return _ok(messages=listed, anchor=anchor, found_newest=len(newer) <= num_after)


def _ok(**body: Any) -> httpx.Response:
    return httpx.Response(200, json={"result": "success", "msg": "", **body})


async def _read(server: Server, after: int, upto: int | None) -> list[int]:
    taken: list[int] = []

    async def take(message: dict[str, Any]) -> None:
        taken.append(message["id"])

    async with httpx.AsyncClient(transport=httpx.MockTransport(server.handle)) as client:
        api = ZulipApi(client, "https://z.example", "bot@z.example", "key")
        assert await catch_up(api, after, upto, NOW_S, take) == len(taken)
    return taken


async def test_pages_follow_the_last_message_oldest_first_up_to_the_registration() -> None:
    server = Server([_message(n) for n in range(1, 2 * NUM_AFTER + 300)])
    upto = 2 * NUM_AFTER + 100
    taken = await _read(server, 50, upto)
    assert taken == list(range(51, upto + 1))
    assert [int(r["anchor"]) for r in server.reads] == [50, 50 + NUM_AFTER, 50 + 2 * NUM_AFTER]
    assert {r["num_after"] for r in server.reads} == {str(NUM_AFTER)}


async def test_without_an_end_it_reads_until_the_newest() -> None:
    server = Server([_message(n) for n in (3, 8, 5)])
    assert await _read(server, 4, None) == [5, 8]
    assert len(server.reads) == 1  # found_newest ends it


async def test_the_page_bound_cuts_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    server = Server([_message(n) for n in range(1, (MAX_PAGES + 1) * NUM_AFTER + 10)])
    with caplog.at_level(logging.WARNING, "taskplane.sources.zulip"):
        taken = await _read(server, 0, None)
    assert len(taken) == MAX_PAGES * NUM_AFTER and len(server.reads) == MAX_PAGES
    assert [getattr(r, "event", None) for r in caplog.records] == ["source_catchup_truncated"]


async def test_messages_past_the_age_bound_are_skipped_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    old = int(NOW_S - MAX_AGE_S) - 5
    server = Server([_message(1, timestamp=old), _message(2, timestamp=old), _message(3)])
    with caplog.at_level(logging.WARNING, "taskplane.sources.zulip"):
        assert await _read(server, 0, 3) == [3]
    assert [getattr(r, "event", None) for r in caplog.records] == ["source_catchup_too_old"]


@attrs.define
class Context(RecordingContext):
    receipts: list[str] = attrs.field(factory=list)

    async def deliver(self, task_id: str, operation_id: str, *args: object, **kw: object) -> str:
        self.receipts.append(operation_id)
        return "ok"


def _source() -> ZulipSource:
    source = ZulipSource("https://z.example", "bot@z.example", "key", clock=lambda: NOW_S)
    source._bot_user = BOT
    return source


async def test_the_first_registration_anchors_and_a_replacement_catches_up() -> None:
    people = [{"id": ALICE, "email": "a@x", "full_name": "Alice"}, {"id": BOT, "email": "b@x"}]
    direct = _message(12, type="private", display_recipient=people, subject="", flags=[])
    server = Server([_message(10)])
    source, ctx = _source(), Context()
    async with httpx.AsyncClient(transport=httpx.MockTransport(server.handle)) as client:
        api = ZulipApi(client, source.site, source.email, source.api_key)
        source._api = api
        state = await source._register(ctx, api, "zulip:x", {})
        assert state == {"queueId": "q1", "lastEventId": -1, "lastMessageId": 10}
        server.messages += [_message(11, flags=[]), direct, _message(13, sender_id=BOT)]
        server.messages.append(_message(14))
        state = await source._register(ctx, api, "zulip:x", state)
        assert state["catchUpTo"] == 14 and state["lastMessageId"] == 10
        await source._catch_up(ctx, api, "zulip:x", state)
    assert [e.identity for _, e in ctx.events] == [("12",), ("14",)]
    assert ctx.events[0][1].conversation == ("direct", str(ALICE), str(BOT))
    assert ctx.receipts == ["handled:12", "handled:14"]
    assert ctx.checkpoint == {
        "queueId": "q2",
        "lastEventId": -1,
        "lastMessageId": 14,
        "nonWork": {"not-a-mention": 1, "own-message": 1},
    }


async def test_a_held_message_or_a_rate_limit_keeps_the_catch_up_for_the_next_poll() -> None:
    server = Server([_message(n) for n in range(21, 25)])
    source, ctx = _source(), Context()
    ctx.refuse = [Overloaded("full")]
    ctx.checkpoint = {"queueId": "q0", "lastEventId": 5, "lastMessageId": 20}
    pending = {"queueId": "q1", "lastEventId": -1, "lastMessageId": 20, "catchUpTo": 24}
    async with httpx.AsyncClient(transport=httpx.MockTransport(server.handle)) as client:
        api = ZulipApi(client, source.site, source.email, source.api_key)
        source._api = api
        await source._register(ctx, api, "zulip:x", dict(ctx.checkpoint))  # type: ignore[arg-type]
        assert ctx.checkpoint == pending
        with pytest.raises(Exception, match="not accepted yet"):
            await source._catch_up(ctx, api, "zulip:x", pending)
        assert ctx.checkpoint == pending  # nothing taken: the same anchor next time
        ctx.events.clear()
        server.limited = 1
        with pytest.raises(ZulipRateLimited) as limited:
            await source._catch_up(ctx, api, "zulip:x", pending)
        assert limited.value.wait_s == 7 and ctx.checkpoint == pending
        await source._catch_up(ctx, api, "zulip:x", pending)
    assert [e.identity for _, e in ctx.events] == [(str(n),) for n in range(21, 25)]
    assert ctx.checkpoint == {"queueId": "q1", "lastEventId": -1, "lastMessageId": 24}
    assert [json.loads(r["anchor"]) for r in server.reads] == [20, 20, 20]
