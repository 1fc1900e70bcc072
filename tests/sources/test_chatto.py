"""The Chatto source in process: the realtime frames' bytes (by the published field
numbers), Connect error bodies, reading notifications, the work decision, the event
it builds, the retry decision, and taking one notification (against an in-memory
ConnectRPC transport, in virtual time)."""

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
from taskplane.sources.chatto import (
    ChattoSource,
    classify,
    notification_event,
    occurrences_of,
    parse_occurrence,
    retry_later,
)
from taskplane.sources.chatto_api import (
    ChattoApi,
    ChattoNotFound,
    ChattoRateLimited,
    ChattoRejected,
    ChattoUnavailable,
    connect_error,
    connect_url,
)
from taskplane.sources.chatto_realtime import decode, encode, realtime_url, refusal
from tests.support.source_context import RecordingContext

VIEWER = "usr0bot"


def _occurrence(**extra: Any) -> dict[str, Any]:
    reference = {"room": {"id": "r1", "name": "general"}, "eventId": "m1"}
    return {
        "id": "n1",
        "actor": {"id": "usr0alice", "displayName": "Alice"},
        "signal": {"directMentionReceived": {"message": reference}},
        **extra,
    }


def test_client_frames_carry_the_published_field_numbers() -> None:
    # RealtimeClientFrame.hello = 1 { protocol_version = 1, bearer_token = 2 }
    hello = encode("RealtimeClientFrame", {"hello": {"protocolVersion": 2, "bearerToken": "k"}})
    assert hello.hex() == "0a05" + "0802" + "12016b"
    # RealtimeClientFrame.subscribe_events = 2 { resume_cursor = 1 }
    subscribe = encode("RealtimeClientFrame", {"subscribeEvents": {"resumeCursor": "cur1"}})
    assert subscribe.hex() == "1206" + "0a04" + b"cur1".hex()


def test_server_frames_decode_and_skip_what_the_schema_does_not_declare() -> None:
    # RealtimeServerFrame.caught_up = 8 { cursor = 1 }
    assert decode("RealtimeServerFrame", bytes.fromhex("42040a026339")) == {
        "caughtUp": {"cursor": "c9"}
    }
    # projection_event = 9 { id = 1 "e", operations = 5 [ { room_upsert = 6 {} } ],
    # field 15 = varint 1 }: the operation and the field this schema lacks are skipped.
    data = bytes.fromhex("4a09" + "0a0165" + "2a023200" + "7801")
    assert decode("RealtimeServerFrame", data) == {
        "projectionEvent": {"id": "e", "operations": [{}]}
    }
    with pytest.raises(ValueError):
        decode("RealtimeServerFrame", b"\x4a\x09\x0a")


def test_a_fatal_error_or_a_close_refuses_and_a_close_may_ask_for_a_delay() -> None:
    assert refusal({"error": {"code": "busy", "fatal": False}}) is None
    fatal = refusal({"error": {"code": "unauthenticated", "fatal": True}})
    assert fatal is not None and "unauthenticated" in str(fatal) and fatal.retry_after_s is None
    closed = refusal({"close": {"code": "restart", "reconnect": True, "retryAfterMs": 2500}})
    assert closed is not None and closed.retry_after_s == 2.5
    assert refusal({"heartbeat": {"id": "h"}}) is None


def test_urls() -> None:
    assert realtime_url("https://chat.example.com/") == "wss://chat.example.com/api/realtime"
    assert realtime_url("http://127.0.0.1:4000") == "ws://127.0.0.1:4000/api/realtime"
    assert (
        connect_url("https://chat.example.com/", "ViewerService", "GetViewer")
        == "https://chat.example.com/api/connect/chatto.api.v1.ViewerService/GetViewer"
    )


@pytest.mark.parametrize(
    ("status", "body", "headers", "kind"),
    [
        (404, {"code": "not_found", "message": "gone"}, {}, ChattoNotFound),
        (403, {"code": "permission_denied"}, {}, ChattoRejected),
        (400, {"code": "invalid_argument"}, {}, ChattoRejected),
        (503, {"code": "unavailable"}, {}, ChattoUnavailable),
        (500, {"code": "internal"}, {}, ChattoUnavailable),
        (502, "<html>bad gateway</html>", {}, ChattoUnavailable),
        (429, {"code": "resource_exhausted"}, {"Retry-After": "7"}, ChattoRateLimited),
    ],
)
def test_a_connect_error_body_decides_the_exception(
    status: int, body: object, headers: dict[str, str], kind: type[Exception]
) -> None:
    error = connect_error("M/m", httpx.Response(status, headers=headers), body)
    assert type(error) is kind
    if isinstance(error, ChattoRateLimited):
        assert error.wait_s == 7
    assert isinstance(error, ProviderRejected) is issubclass(kind, ChattoRejected)


def test_a_rate_limit_without_retry_after_waits_ten_seconds() -> None:
    error = connect_error("M/m", httpx.Response(429), {"code": "resource_exhausted"})
    assert isinstance(error, ChattoRateLimited) and error.wait_s == 10


def test_an_occurrence_is_read_with_its_exact_message_and_thread() -> None:
    found = parse_occurrence(_occurrence())
    assert (found.id, found.kind, found.room_id, found.event_id) == (
        "n1",
        "directMentionReceived",
        "r1",
        "m1",
    )
    assert found.root_id == "m1" and found.actor_name == "Alice"
    threaded = _occurrence()
    threaded["signal"]["directMentionReceived"]["message"]["threadRootEventId"] = "m0"
    assert parse_occurrence(threaded).root_id == "m0"
    with pytest.raises(ValueError, match="an id and a signal"):
        parse_occurrence({"id": "n1"})
    with pytest.raises(ValueError, match="names no message"):
        parse_occurrence({"id": "n1", "signal": {"futureKind": {}}})


def test_the_occurrences_of_a_projection_event_are_those_of_its_replacements() -> None:
    event = {
        "operations": [
            {"reset": {}},
            {"notificationOccurrencesReplace": {"occurrences": {"occurrences": [_occurrence()]}}},
            {"notificationOccurrencesReplace": {}},
        ]
    }
    assert [o["id"] for o in occurrences_of(event)] == ["n1"]
    assert occurrences_of({}) == []


def test_work_is_a_direct_message_a_direct_mention_or_a_reply() -> None:
    found = parse_occurrence(_occurrence())
    assert classify(found, VIEWER) == "work"
    for kind in ("directMessageReceived", "replyReceived"):
        assert classify(attrs.evolve(found, kind=kind), VIEWER) == "work"
    assert classify(attrs.evolve(found, kind="reactionReceived"), VIEWER) == "reactionReceived"
    assert classify(attrs.evolve(found, actor_id=VIEWER), VIEWER) == "own-activity"


def test_the_event_is_keyed_by_notification_and_converses_in_room_and_thread_root() -> None:
    event = notification_event("chatto:x", parse_occurrence(_occurrence()), "hello")
    assert event.identity == ("n1",) and event.conversation == ("r1", "m1")
    assert event.locator == {
        "notificationId": "n1",
        "roomId": "r1",
        "eventId": "m1",
        "threadRootId": "",
    }
    assert event.parts[0].text == "Chatto message from user usr0alice in room r1:\nhello"


def test_a_renamed_author_or_room_is_the_same_payload() -> None:
    renamed = _occurrence(actor={"id": "usr0alice", "displayName": "Alice B."})
    renamed["signal"]["directMentionReceived"]["message"]["room"]["name"] = "general-2"
    before = notification_event("chatto:x", parse_occurrence(_occurrence()), "hello")
    after = notification_event("chatto:x", parse_occurrence(renamed), "hello")
    assert before.parts == after.parts


@pytest.mark.parametrize(
    ("error", "later"),
    [
        (ChattoUnavailable("503"), True),
        (ChattoRateLimited("429", 3), True),
        (Overloaded("full"), True),
        (ChattoRejected("403", "permission_denied"), False),
        (ChattoNotFound("404", "not_found"), False),
        (PayloadTooLarge("big"), False),
        (DuplicateMessageId("changed"), False),
    ],
)
def test_the_retry_decision_is_one_function(error: Exception, later: bool) -> None:
    assert retry_later(error) is later


def test_a_failed_dismissal_is_retried_only_when_its_cause_is_transient() -> None:
    for cause, later in [(ChattoUnavailable("x"), True), (ProviderRejected("no"), False)]:
        try:
            raise DeliveryFailed("dismissal") from cause
        except DeliveryFailed as exc:
            assert retry_later(exc) is later


def test_settings_need_the_url_and_the_token() -> None:
    record = load_sources({"OUTFITTER_CHANNELS": "chatto", "CHATTO_URL": "http://x"})
    assert record.chatto is not None
    with pytest.raises(ValueError, match="CHATTO_URL and CHATTO_TOKEN"):
        ChattoSource.from_settings(record.chatto)
    detected = load_sources({"CHATTO_URL": "http://x", "CHATTO_TOKEN": "t"})
    assert detected.selected == ("chatto",) and detected.chatto is not None
    assert ChattoSource.from_settings(detected.chatto).url == "http://x"


@attrs.define
class Context(RecordingContext):
    """Records each acknowledgement's operation ID and performs it."""

    acks: list[tuple[str, str]] = attrs.field(factory=list)

    async def deliver(
        self, task_id: str, operation_id: str, payload: str, send: Any, **kw: Any
    ) -> str:
        answer: str = await send()
        self.acks.append((operation_id, answer))
        return answer


@attrs.define
class Chatto:
    """An in-memory ConnectRPC endpoint: ``answers`` per method, consumed in order
    (the last one repeats); ``calls`` the methods called."""

    answers: dict[str, list[tuple[int, dict[str, Any]]]]
    calls: list[str] = attrs.field(factory=list)

    def handle(self, request: httpx.Request) -> httpx.Response:
        method = request.url.path.rsplit(".", 1)[1]
        assert request.headers["Content-Type"] == "application/json"
        self.calls.append(method)
        queue = self.answers[method]
        status, body = queue.pop(0) if len(queue) > 1 else queue[0]
        # As a server's JSON may: ASCII, every other character escaped.
        return httpx.Response(status, content=json.dumps(body).encode())


async def _take(chatto: Chatto, ctx: Context) -> None:
    async with httpx.AsyncClient(transport=httpx.MockTransport(chatto.handle)) as client:
        source = ChattoSource("http://chatto", "t")
        source._api = ChattoApi(client, "http://chatto", "t")
        source._viewer = VIEWER
        await source._retained(ctx, "chatto:x", parse_occurrence(_occurrence()))


OK_MESSAGE = (200, {"message": {"id": "m1", "body": "please"}})
OK_OCCURRENCE = (200, {"occurrence": _occurrence()})


async def test_a_notification_is_accepted_then_dismissed_and_a_transient_failure_waits(
    autojump_clock: trio.testing.MockClock,
) -> None:
    chatto = Chatto(
        {
            "NotificationService/GetNotificationOccurrence": [
                (503, {"code": "unavailable"}),
                (429, {"code": "resource_exhausted"}),
                OK_OCCURRENCE,
            ],
            "MessageService/GetMessage": [OK_MESSAGE],
            "NotificationService/DeleteNotificationOccurrence": [(200, {})],
        }
    )
    ctx = Context()
    await _take(chatto, ctx)
    assert [round(t) for t, _ in ctx.events] == [11]  # 1 s backoff, then Retry-After 10 s
    assert ctx.events[0][1].parts[0].text.endswith("\nplease")
    assert ctx.acks == [("dismiss:n1", "already-handled")]  # deleted: false
    assert ctx.evidence_kinds == []


async def test_a_notification_gone_before_it_is_read_is_evidence() -> None:
    chatto = Chatto(
        {"NotificationService/GetNotificationOccurrence": [(404, {"code": "not_found"})]}
    )
    ctx = Context()
    await _take(chatto, ctx)
    assert ctx.events == [] and ctx.acks == []
    assert ctx.evidence_kinds == ["dismissed-elsewhere"]


async def test_a_refusal_by_the_plane_is_evidence_and_a_dismissal_not_found_is_handled() -> None:
    answers = {
        "NotificationService/GetNotificationOccurrence": [OK_OCCURRENCE],
        "MessageService/GetMessage": [OK_MESSAGE],
        "NotificationService/DeleteNotificationOccurrence": [(404, {"code": "not_found"})],
    }
    ctx = Context(refuse=[DuplicateMessageId("changed")])
    await _take(Chatto(answers), ctx)
    assert ctx.evidence_kinds == ["refused"] and ctx.acks == []
    ctx = Context()
    await _take(Chatto(answers), ctx)
    assert ctx.acks == [("dismiss:n1", "already-handled")]
    assert json.loads(json.dumps(ctx.events[0][1].locator))["notificationId"] == "n1"


def _dismissals(chatto: Chatto) -> int:
    return chatto.calls.count("NotificationService/DeleteNotificationOccurrence")


DELETED = (200, {"deleted": True})


async def test_a_body_with_a_lone_surrogate_is_malformed_and_dismissed() -> None:
    # Chatto's JSON may escape a lone surrogate; it decodes but is not UTF-8 text.
    answers = {
        "NotificationService/GetNotificationOccurrence": [OK_OCCURRENCE],
        "MessageService/GetMessage": [(200, {"message": {"id": "m1", "body": "a\ud800b"}})],
        "NotificationService/DeleteNotificationOccurrence": [DELETED],
    }
    chatto, ctx = Chatto(answers), Context()
    await _take(chatto, ctx)
    assert ctx.events == [] and ctx.evidence_kinds == ["malformed"] and _dismissals(chatto) == 1


async def test_an_occurrence_whose_ids_are_not_text_is_malformed_evidence_only() -> None:
    source = ChattoSource("http://chatto", "t")
    ctx = Context()
    await source._offer(ctx, "chatto:x", _occurrence(id="n\ud800"), "ev-1")
    assert ctx.evidence_kinds == ["malformed"] and ctx.events == []


@pytest.mark.parametrize("refusal", [PayloadTooLarge("big"), DuplicateMessageId("changed")])
async def test_a_refused_notification_is_evidence_then_dismissed(refusal: Exception) -> None:
    answers = {
        "NotificationService/GetNotificationOccurrence": [OK_OCCURRENCE],
        "MessageService/GetMessage": [OK_MESSAGE],
        "NotificationService/DeleteNotificationOccurrence": [DELETED],
    }
    chatto, ctx = Chatto(answers), Context(refuse=[refusal])
    await _take(chatto, ctx)
    assert ctx.evidence_kinds == ["refused"] and _dismissals(chatto) == 1


async def test_a_message_gone_is_evidence_then_its_notification_dismissed_once_recorded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    answers = {
        "NotificationService/GetNotificationOccurrence": [OK_OCCURRENCE],
        "MessageService/GetMessage": [(404, {"code": "not_found"})],
        "NotificationService/DeleteNotificationOccurrence": [
            (503, {"code": "unavailable"}),
            DELETED,
        ],
    }
    chatto, ctx = Chatto(answers), Context()
    await _take(chatto, ctx)
    assert ctx.evidence_kinds == ["dismissed-elsewhere"]  # once, though dismissed on a retry
    assert _dismissals(chatto) == 2


async def test_an_answer_over_16_mib_is_unavailable_and_not_read_whole() -> None:
    big = b'{"x": "' + b"a" * (16 << 20) + b'"}'
    transport = httpx.MockTransport(lambda r: httpx.Response(200, content=big))
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(ChattoUnavailable, match="exceeds 16777216 bytes"):
            await ChattoApi(client, "http://chatto", "t").call("ViewerService", "GetViewer", {})
