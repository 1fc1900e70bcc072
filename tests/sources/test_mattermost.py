"""The Mattermost source in process: reading ``posted`` events, the work decision,
the event it builds, the retry decision, rate-limit waits, and the retained-event
retry in virtual time."""

from __future__ import annotations

import json
from typing import Any

import attrs
import httpx
import pytest
import trio

from taskplane.actors.outbound import DeliveryFailed, ProviderRejected
from taskplane.errors import DuplicateMessageId, Overloaded, PayloadTooLarge
from taskplane.settings import load_sources
from taskplane.sources.mattermost import (
    MattermostSource,
    Post,
    classify,
    parse_posted,
    post_event,
    retry_later,
)
from taskplane.sources.mattermost_api import (
    MattermostRateLimited,
    MattermostRejected,
    MattermostUnavailable,
    rate_limit_wait,
    websocket_url,
)
from tests.support.source_context import RecordingContext

BOT = "bot0user0id0000000000000000"


def _frame(**post: Any) -> dict[str, Any]:
    body = {"id": "p1", "channel_id": "c1", "user_id": "u1", "root_id": "", "message": "hi"}
    return {
        "event": "posted",
        "data": {
            "channel_type": "O",
            "channel_name": "town-square",
            "mentions": json.dumps([BOT]),
            "post": json.dumps({**body, **post}),
            "sender_name": "@alice",
        },
        "seq": 4,
    }


def test_a_posted_event_is_read_from_its_json_strings() -> None:
    post = parse_posted(_frame())
    assert (post.id, post.channel_id, post.root_id, post.user_id) == ("p1", "c1", "p1", "u1")
    assert post.mentions == {BOT} and post.channel_name == "town-square"
    assert parse_posted(_frame(root_id="r0")).root_id == "r0"
    with pytest.raises(ValueError, match="lacks its id"):
        parse_posted(_frame(id=""))
    with pytest.raises(ValueError, match=r"data\.post"):
        parse_posted({"event": "posted", "data": {}})


def test_work_is_a_mention_or_a_direct_message_in_an_allowed_channel() -> None:
    post = parse_posted(_frame())
    assert classify(post, BOT, frozenset()) == "work"
    assert classify(post, BOT, frozenset({"c2"})) == "channel-not-allowed"
    assert classify(attrs.evolve(post, mentions=frozenset()), BOT, frozenset()) == "not-a-mention"
    direct = attrs.evolve(post, mentions=frozenset(), channel_type="D")
    assert classify(direct, BOT, frozenset()) == "work"
    assert classify(attrs.evolve(post, user_id=BOT), BOT, frozenset()) == "own-post"
    assert classify(attrs.evolve(post, kind="system_join_channel"), BOT, frozenset()) == "system"


def test_the_event_is_keyed_by_post_and_converses_in_channel_and_root() -> None:
    event = post_event("mattermost:x", parse_posted(_frame(root_id="r0")))
    assert event.identity == ("p1",) and event.conversation == ("c1", "r0")
    assert event.locator == {"channelId": "c1", "postId": "p1", "rootId": "r0", "userId": "u1"}
    assert event.parts[0].text == "Mattermost message from @alice in ~town-square:\nhi"


@pytest.mark.parametrize(
    ("error", "later"),
    [
        (MattermostUnavailable("502"), True),
        (MattermostRateLimited(3), True),
        (Overloaded("full"), True),
        (MattermostRejected("403"), False),
        (PayloadTooLarge("big"), False),
        (DuplicateMessageId("changed"), False),
    ],
)
def test_the_retry_decision_is_one_function(error: Exception, later: bool) -> None:
    assert retry_later(error) is later


def test_a_failed_receipt_is_retried_only_when_its_cause_is_transient() -> None:
    for cause, later in [(MattermostUnavailable("x"), True), (ProviderRejected("no"), False)]:
        try:
            raise DeliveryFailed("receipt") from cause
        except DeliveryFailed as exc:
            assert retry_later(exc) is later


def test_urls_and_rate_limit_waits() -> None:
    assert websocket_url("https://chat.example.com/") == "wss://chat.example.com/api/v4/websocket"
    assert websocket_url("http://127.0.0.1:8065") == "ws://127.0.0.1:8065/api/v4/websocket"
    assert rate_limit_wait(httpx.Response(429, headers={"X-Ratelimit-Reset": "7"})) == 7
    assert rate_limit_wait(httpx.Response(429, headers={"Retry-After": "99999"})) == 3600
    assert rate_limit_wait(httpx.Response(429)) == 10


def test_settings_need_the_url_and_the_token() -> None:
    record = load_sources({"OUTFITTER_CHANNELS": "mattermost", "MATTERMOST_URL": "http://x"})
    assert record.mattermost is not None
    with pytest.raises(ValueError, match="MATTERMOST_URL and MATTERMOST_TOKEN"):
        MattermostSource.from_settings(record.mattermost)
    detected = load_sources(
        {
            "MATTERMOST_URL": "http://x",
            "MATTERMOST_TOKEN": "t",
            "MATTERMOST_ALLOWED_CHANNELS": "a,b",
        }
    )
    assert detected.selected == ("mattermost",) and detected.mattermost is not None
    assert MattermostSource.from_settings(detected.mattermost).allowed_channels == {"a", "b"}


@attrs.define
class Context(RecordingContext):
    """Writes no evidence; records each receipt's operation id."""

    receipts: list[str] = attrs.field(factory=list)

    async def evidence(self, classification: str, record: dict[str, object]) -> None:
        raise AssertionError(classification)

    async def deliver(self, task_id: str, operation_id: str, *args: object, **kw: object) -> str:
        self.receipts.append(operation_id)
        return "ok"


async def test_a_transient_failure_retries_the_retained_post_with_backoff(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = MattermostSource("http://x", "t")
    source._bot_user = BOT
    ctx = Context(refuse=[Overloaded("full"), Overloaded("full")])
    post = Post("p1", "c1", "p1", "u1", "hi", mentions=frozenset({BOT}))
    await source._retained(ctx, "mattermost:x", post)
    assert [round(t) for t, _ in ctx.events] == [3]  # after 1 s, then 2 s
    assert ctx.receipts == ["handled:p1"]
    assert ctx.checkpoint == {"lastPostId": "p1"}
