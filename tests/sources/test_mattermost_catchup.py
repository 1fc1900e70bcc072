"""The Mattermost catch-up in process, against a REST v4 stand-in behind
``httpx.MockTransport``: oldest-first ordering of post lists, paging by cursor, the
page and age bounds, the ``since`` fallback for a vanished cursor post, rate-limit
waits in virtual time, and the source's checkpoint (arming, per-channel cursors)."""

from __future__ import annotations

import json
import logging
from typing import Any

import attrs
import httpx
import pytest
import trio

from taskplane.sources.mattermost import MattermostSource, advanced, mentions_of, rest_post
from taskplane.sources.mattermost_api import MattermostApi
from taskplane.sources.mattermost_catchup import (
    MAX_AGE_S,
    MAX_PAGES,
    PER_PAGE,
    Channel,
    Cursor,
    catch_up,
    listed_posts,
    read_cursors,
)
from tests.support.source_context import RecordingContext

BOT = "bot0user0id0000000000000000"
ALICE = "alice0user0id000000000000000"
NOW_MS = 1_800_000_000_000


def _post(n: int, channel: str = "c1", **extra: Any) -> dict[str, Any]:
    return {
        "id": f"p{n:05d}",
        "channel_id": channel,
        "user_id": ALICE,
        "root_id": "",
        "message": f"@taskbot number {n}",
        "create_at": NOW_MS - 3_600_000 + n,
        "update_at": NOW_MS - 3_600_000 + n,
        "delete_at": 0,
        "type": "",
        **extra,
    }


@attrs.define
class Server:
    """The REST endpoints the catch-up uses, with the server's paging rules."""

    posts: list[dict[str, Any]]
    requests: list[dict[str, str]] = attrs.field(factory=list)
    limited: list[int] = attrs.field(factory=list)  # X-Ratelimit-Reset of the next 429s

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/api/v4/users/me/channels":
            return httpx.Response(200, json=[{"id": "c1", "type": "O", "name": "town-square"}])
        if path == "/api/v4/users/ids":
            ids = json.loads(request.content)
            return httpx.Response(200, json=[{"id": i, "username": "alice"} for i in ids])
        args = dict(request.url.params)
        self.requests.append(args)
        if self.limited:
            reset = self.limited.pop(0)
            return httpx.Response(429, headers={"X-Ratelimit-Reset": str(reset)}, json={})
        channel = path.split("/")[4]
        mine = sorted((p for p in self.posts if p["channel_id"] == channel), key=_created)
        if "since" in args:
            assert not {"after", "page", "per_page"} & set(args)
            listed = [p for p in mine if p["update_at"] > int(args["since"])][:1000]
        else:
            anchor = [p for p in self.posts if p["id"] == args["after"]]
            newer = [p for p in mine if anchor and p["create_at"] > anchor[0]["create_at"]]
            page, per_page = int(args["page"]), int(args["per_page"])
            listed = newer[page * per_page : (page + 1) * per_page]
        body = {"order": [p["id"] for p in reversed(listed)], "posts": {p["id"]: p for p in listed}}
        return httpx.Response(200, json=body)


def _created(post: dict[str, Any]) -> int:
    return int(post["create_at"])


async def _run(server: Server, cursor: Cursor) -> tuple[list[str], int]:
    taken: list[str] = []

    async def take(batch: list[dict[str, Any]]) -> None:
        taken.extend(p["id"] for p in batch)

    async with httpx.AsyncClient(transport=httpx.MockTransport(server.handle)) as client:
        api = MattermostApi(client, "http://mm", "t")
        count = await catch_up(api, Channel("c1"), cursor, NOW_MS, take)
    return taken, count


def test_a_post_list_is_taken_oldest_first_and_only_what_order_lists() -> None:
    a, b, c = _post(1), _post(2), _post(3)
    root = _post(0)  # a thread root riding along, outside order
    gone = {**_post(4), "delete_at": NOW_MS}
    body = {
        "order": [gone["id"], c["id"], b["id"], a["id"]],
        "posts": {p["id"]: p for p in (a, b, c, root, gone)},
    }
    assert [p["id"] for p in listed_posts(body, 0)] == ["p00001", "p00002", "p00003"]
    assert [p["id"] for p in listed_posts(body, a["create_at"])] == ["p00002", "p00003"]
    with pytest.raises(ValueError, match="order and posts"):
        listed_posts({"posts": {}}, 0)


async def test_pages_follow_the_cursor_until_a_short_page() -> None:
    server = Server([_post(n) for n in range(451)])
    taken, count = await _run(server, Cursor("p00000", _post(0)["create_at"]))
    assert taken == [f"p{n:05d}" for n in range(1, 451)] and count == 450
    assert [r["after"] for r in server.requests] == ["p00000", "p00200", "p00400"]
    assert all(r["page"] == "0" and r["per_page"] == str(PER_PAGE) for r in server.requests)


async def test_nothing_new_asks_by_time_once_and_takes_nothing() -> None:
    server = Server([_post(n) for n in range(3)])
    taken, _ = await _run(server, Cursor("p00002", _post(2)["create_at"]))
    assert taken == []
    assert server.requests == [
        {"after": "p00002", "page": "0", "per_page": str(PER_PAGE)},
        {"since": str(_post(2)["create_at"])},
    ]


async def test_a_vanished_cursor_post_falls_back_to_its_time_then_pages_on() -> None:
    server = Server([_post(n) for n in range(3, 6)])  # p00002 was deleted for good
    edited_old = {**_post(1), "update_at": NOW_MS}  # modified since, created before
    server.posts.append(edited_old)
    taken, _ = await _run(server, Cursor("p00002", _post(2)["create_at"]))
    assert taken == ["p00003", "p00004", "p00005"]
    assert [sorted(r) for r in server.requests] == [
        ["after", "page", "per_page"],
        ["since"],
        ["after", "page", "per_page"],
    ]
    assert server.requests[2]["after"] == "p00005"


async def test_a_channel_without_a_cursor_starts_from_its_time() -> None:
    server = Server([_post(n) for n in range(4)])
    taken, _ = await _run(server, Cursor(None, _post(1)["create_at"]))
    assert taken == ["p00002", "p00003"]
    assert sorted(server.requests[0]) == ["since"]


async def test_the_catch_up_stops_after_its_page_bound(caplog: pytest.LogCaptureFixture) -> None:
    server = Server([_post(n) for n in range(PER_PAGE * MAX_PAGES + 50)])
    with caplog.at_level(logging.WARNING, "taskplane.sources.mattermost"):
        taken, count = await _run(server, Cursor("p00000", _post(0)["create_at"]))
    assert len(server.requests) == MAX_PAGES and count == len(taken) == PER_PAGE * MAX_PAGES
    assert taken == sorted(taken)
    assert [r.event for r in caplog.records] == ["source_catchup_truncated"]  # type: ignore[attr-defined]


async def test_posts_older_than_the_age_bound_are_not_taken(
    caplog: pytest.LogCaptureFixture,
) -> None:
    floor = NOW_MS - int(MAX_AGE_S * 1000)
    old = {**_post(1), "create_at": floor - 5, "update_at": floor - 5}
    recent = {**_post(2), "create_at": floor + 5, "update_at": floor + 5}
    server = Server([{**_post(0), "create_at": floor - 10}, old, recent])
    with caplog.at_level(logging.WARNING, "taskplane.sources.mattermost"):
        taken, _ = await _run(server, Cursor("p00000", floor - 10))
    assert taken == ["p00002"]
    assert server.requests[0] == {"since": str(floor)}
    assert [r.event for r in caplog.records] == ["source_catchup_too_old"]  # type: ignore[attr-defined]


async def test_a_rate_limited_page_waits_for_the_reset(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = Server([_post(n) for n in range(3)], limited=[7])
    start = trio.current_time()
    taken, _ = await _run(server, Cursor("p00000", _post(0)["create_at"]))
    assert taken == ["p00001", "p00002"]
    assert trio.current_time() - start == pytest.approx(7)
    assert len(server.requests) == 2  # the limited one, then the same page again


def test_a_rest_post_reads_like_the_websocket_event_of_it() -> None:
    channel = Channel("c1", "O", "town-square")
    post = rest_post(_post(7), channel, "@alice", "taskbot", BOT)
    assert rest_post(_post(8, root_id="p00007"), channel, "", "", BOT).root_id == "p00007"
    assert (post.id, post.root_id, post.channel_name, post.sender_name) == (
        "p00007",
        "p00007",
        "town-square",
        "@alice",
    )
    assert post.mentions == {BOT} and post.created_ms == _post(7)["create_at"]
    assert mentions_of("hey @TaskBot, look", "taskbot", BOT) == {BOT}
    assert mentions_of("@taskbot.", "taskbot", BOT) == {BOT}
    for other in ("@taskbotter", "@taskbot-2", "me@taskbot.dev", "taskbot", "@taskbot.dev"):
        assert mentions_of(other, "taskbot", BOT) == frozenset(), other
    with pytest.raises(ValueError, match="lacks its id"):
        rest_post({**_post(1), "id": ""}, channel, "", "taskbot", BOT)


def test_a_channel_cursor_only_moves_forward() -> None:
    channel = Channel("c1")
    newer = rest_post(_post(5), channel, "", "taskbot", BOT)
    older = rest_post(_post(3), channel, "", "taskbot", BOT)
    state = advanced({"lastPostId": "x"}, newer)
    assert read_cursors(state["channels"]) == {"c1": Cursor("p00005", newer.created_ms)}
    assert advanced(state, older) == state
    assert read_cursors({"c1": {"postId": 3}, "c2": "x", "c3": {"at": 9}}) == {
        "c3": Cursor(None, 9)
    }


@attrs.define
class Context(RecordingContext):
    receipts: list[str] = attrs.field(factory=list)

    async def deliver(self, task_id: str, operation_id: str, *args: object, **kw: object) -> str:
        self.receipts.append(operation_id)
        return "ok"


async def test_the_source_arms_on_its_first_connection_then_takes_what_it_missed() -> None:
    server = Server([_post(1), {**_post(2), "message": "chatter"}, _post(3)])
    source = MattermostSource("http://mm", "t", clock=lambda: NOW_MS / 1000)
    source._bot_user, source._bot_username = BOT, "taskbot"
    ctx = Context()
    async with httpx.AsyncClient(transport=httpx.MockTransport(server.handle)) as client:
        source._api = MattermostApi(client, "http://mm", "t")
        assert await source.catch_up(ctx, "mattermost:x") == set()
        assert ctx.checkpoint == {"catchUpFrom": NOW_MS} and server.requests == []
        ctx.checkpoint = {
            "catchUpFrom": NOW_MS - 3_600_000,
            "channels": {"c1": {"postId": "p00000", "at": _post(0)["create_at"]}},
        }
        server.posts.insert(0, _post(0))
        caught = await source.catch_up(ctx, "mattermost:x")
    assert caught == {"p00001", "p00002", "p00003"}
    assert [e.identity for _, e in ctx.events] == [("p00001",), ("p00003",)]
    assert ctx.events[0][1].parts[0].text == (
        "Mattermost message from @alice in ~town-square:\n@taskbot number 1"
    )
    assert ctx.receipts == ["handled:p00001", "handled:p00003"]
    assert isinstance(ctx.checkpoint, dict)
    assert ctx.checkpoint["lastPostId"] == "p00003"
    assert ctx.checkpoint["nonWork"] == {"c1/not-a-mention": 1}
    cursor = Cursor("p00003", _post(3)["create_at"])
    assert read_cursors(ctx.checkpoint["channels"]) == {"c1": cursor}


class _Socket:
    """A stand-in WebSocket that yields ``frames`` and then ends the connection."""

    def __init__(self, frames: list[str]) -> None:
        self.frames = frames

    async def get_message(self) -> str:
        if not self.frames:
            raise EOFError("closed")
        return self.frames.pop(0)


async def test_the_socket_skips_the_posts_its_catch_up_took() -> None:
    def posted(post_id: str) -> str:
        post = json.dumps({"id": post_id, "channel_id": "c1", "user_id": ALICE, "create_at": 5})
        data = {"channel_type": "O", "mentions": json.dumps([BOT]), "post": post}
        return json.dumps({"event": "posted", "data": data, "seq": 1})

    source = MattermostSource("http://mm", "t")
    source._bot_user = BOT
    ctx = Context()
    socket = _Socket([posted("p1"), posted("p2")])
    with pytest.raises(EOFError):
        await source._serve(ctx, socket, "mattermost:x", {"p1"})  # type: ignore[arg-type]
    assert [e.identity for _, e in ctx.events] == [("p2",)]
