"""The Zulip source in process: the work decision, the event it builds for stream and
direct messages, the reply it sends, the retry decision and rate-limit waits."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from taskplane.actors.outbound import DeliveryFailed
from taskplane.errors import DuplicateMessageId, Overloaded, PayloadTooLarge, StoreUnavailable
from taskplane.settings import load_sources
from taskplane.sources.zulip import ZulipSource, classify, message_event, retry_later
from taskplane.sources.zulip_api import (
    QueueGone,
    ZulipApi,
    ZulipRateLimited,
    ZulipRejected,
    ZulipUnavailable,
    rate_limit_wait,
)

BOT = 9


def _stream(**over: Any) -> dict[str, Any]:
    message = {
        "id": 101,
        "sender_id": 11,
        "sender_full_name": "Alice",
        "type": "stream",
        "stream_id": 3,
        "display_recipient": "engineering",
        "subject": "deploys",
        "content": "@**Task Bot** status?",
    }
    return {**message, **over}


def _direct(**over: Any) -> dict[str, Any]:
    people = [{"id": 11, "email": "a@x", "full_name": "Alice"}, {"id": 9, "email": "b@x"}]
    return _stream(type="private", display_recipient=people, subject="", **over)


def test_work_is_a_mention_or_a_direct_message_from_someone_else() -> None:
    message = _stream()
    assert classify({"type": "message", "message": message, "flags": ["mentioned"]}, BOT) == "work"
    wildcard = {"type": "message", "message": message, "flags": ["wildcard_mentioned"]}
    assert classify(wildcard, BOT) == "work"
    assert classify({"type": "message", "message": message, "flags": []}, BOT) == "not-a-mention"
    assert classify({"type": "message", "message": _direct(), "flags": []}, BOT) == "work"
    own = {"type": "message", "message": _stream(sender_id=BOT), "flags": ["mentioned"]}
    assert classify(own, BOT) == "own-message"
    assert classify({"type": "heartbeat", "id": 4}, BOT) == "heartbeat"
    assert classify({"type": "presence", "id": 5}, BOT) == "other-event"


def test_a_stream_message_converses_in_its_topic_and_a_direct_one_with_its_people() -> None:
    stream = message_event("zulip:x", _stream())
    assert stream.identity == ("101",) and stream.conversation == ("stream", "3", "deploys")
    assert stream.locator == {
        "messageId": "101",
        "kind": "stream",
        "streamId": "3",
        "topic": "deploys",
    }
    assert stream.parts[0].text == (
        "Zulip message from Alice in #engineering > deploys:\n@**Task Bot** status?"
    )
    direct = message_event("zulip:x", _direct())
    assert direct.conversation == ("direct", "11", "9")
    assert direct.locator["participants"] == "11,9"
    with pytest.raises(ValueError, match="stream_id and topic"):
        message_event("zulip:x", _stream(subject=""))


@pytest.mark.parametrize(
    ("error", "later"),
    [
        (ZulipUnavailable("502"), True),
        (ZulipRateLimited(3), True),
        (Overloaded("full"), True),
        (StoreUnavailable("disk"), True),
        (ZulipRejected("400", "BAD_REQUEST"), False),
        (PayloadTooLarge("big"), False),
        (DuplicateMessageId("changed"), False),
    ],
)
def test_the_retry_decision_is_one_function(error: Exception, later: bool) -> None:
    assert retry_later(error) is later


def test_a_failed_receipt_is_retried_only_when_its_cause_is_transient() -> None:
    for cause, later in [(ZulipUnavailable("x"), True), (ZulipRejected("no", "X"), False)]:
        try:
            raise DeliveryFailed("receipt") from cause
        except DeliveryFailed as exc:
            assert retry_later(exc) is later


def test_rate_limit_waits_come_from_the_header_or_the_body() -> None:
    assert rate_limit_wait(httpx.Response(429, headers={"Retry-After": "4"}), None) == 4
    assert rate_limit_wait(httpx.Response(429), {"retry-after": 2.5}) == 2.5
    assert rate_limit_wait(httpx.Response(429), {}) == 10
    assert issubclass(QueueGone, ZulipRejected)


def _result(locator: dict[str, str]) -> Any:
    class _Delivery:
        delivery_id = "delivery-1"

    class _Result:
        text = "done"
        delivery = _Delivery()

    result = _Result()
    result.locator = locator  # type: ignore[attr-defined]
    return result


async def test_the_reply_goes_to_the_topic_or_to_the_other_participants() -> None:
    sent: list[dict[str, str]] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(dict(httpx.QueryParams(request.content.decode())))
        return httpx.Response(200, json={"result": "success", "msg": "", "id": 555})

    source = ZulipSource("https://z.example", "bot@z.example", "key")
    source._bot_user = BOT
    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:
        source._api = ZulipApi(client, source.site, source.email, source.api_key)
        stream = message_event("zulip:x", _stream()).locator
        direct = message_event("zulip:x", _direct()).locator
        assert await source.sender(_result(dict(stream))).send() == "555"
        assert await source.sender(_result(dict(direct))).send() == "555"
    assert sent[0] == {"type": "stream", "to": "3", "topic": "deploys", "content": "done"}
    assert sent[1] == {"type": "direct", "to": "[11]", "content": "done"}


def test_settings_need_all_three_zuliprc_values() -> None:
    record = load_sources({"OUTFITTER_CHANNELS": "zulip", "ZULIP_SITE": "https://z.example"})
    assert record.zulip is not None
    with pytest.raises(ValueError, match="ZULIP_SITE, ZULIP_EMAIL and ZULIP_API_KEY"):
        ZulipSource.from_settings(record.zulip)
    detected = load_sources(
        {"ZULIP_SITE": "https://z.example", "ZULIP_EMAIL": "e", "ZULIP_API_KEY": "k"}
    )
    assert detected.selected == ("zulip",)
