"""The relay's inbox file format: what is an event and what is malformed."""

from __future__ import annotations

import json

import pytest

from taskplane.errors import InvalidRequest
from taskplane.sources.identity import source_identifier
from taskplane.sources.relay import parse_event

BASE = {"from": "agent-a", "conversationId": "c-1", "messageId": "m-1"}


def raw(**fields: object) -> bytes:
    return json.dumps({**BASE, **fields}).encode()


def test_a_text_event_hashes_its_identity_and_keeps_the_locator() -> None:
    event = parse_event(raw(text="hello", replyTo="response-1"))
    assert event.principal == source_identifier("agent", "agent-a")
    assert event.identity == ("m-1",) and event.conversation == ("c-1",)
    assert [p.text for p in event.parts] == ["hello"]
    assert dict(event.locator) == {"from": "agent-a", "conversationId": "c-1", "messageId": "m-1"}
    assert event.reply_to == "response-1"


def test_a_parts_event_decodes_a2a_parts() -> None:
    event = parse_event(raw(parts=[{"text": "a"}, {"data": {"k": 1}}]))
    assert event.parts[0].text == "a" and event.parts[1].data is not None


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[1, 2]",
        raw(),  # neither text nor parts
        raw(text="a", parts=[{"text": "b"}]),  # both
        raw(text=""),
        raw(text="a", taskId="t-1"),  # unknown field: never a continuation by ID
        raw(text="bad \ud800 char"),  # a lone surrogate is not text
        raw(parts=[{"data": {"v": json.loads("[" * 70 + "]" * 70)}}]),  # deeper than 64
        raw(parts=[]),
        raw(text="a", replyTo=""),
        json.dumps({"from": "agent-a", "messageId": "m-1", "text": "a"}).encode(),
        json.dumps({**BASE, "from": 7, "text": "a"}).encode(),
    ],
)
def test_malformed_files_are_refused(body: bytes) -> None:
    with pytest.raises((ValueError, InvalidRequest)):
        parse_event(body)


def test_a_malformed_part_is_refused() -> None:
    with pytest.raises(InvalidRequest):
        parse_event(raw(parts=[{"text": 5}]))
