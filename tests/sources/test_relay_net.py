"""The relay over a relay server, one poll at a time against an in-memory server
(``httpx.MockTransport``): each message is accepted, then checkpointed, then
acknowledged; a failure holds the cursor; an owed ack is made before the next page;
the client reads the protocol's answers; the settings select one transport."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio
import trio.testing

from taskplane.actors.outbound import DeliveryFailed, ProviderRejected, Send
from taskplane.errors import DuplicateMessageId, Overloaded, StoreUnavailable
from taskplane.settings import load_sources
from taskplane.sources.base import Event
from taskplane.sources.relay import RelayConfigError, RelaySource
from taskplane.sources.relay_api import (
    DEFAULT_RATE_WAIT_S,
    MAX_BODY_BYTES,
    CursorExpired,
    RelayApi,
    RelayRateLimited,
    RelayRejected,
    RelayUnavailable,
)
from taskplane.sources.relay_net import RelayNetSource, _Held, retry_later

URL = "https://relay.example/agents/t"


def message(message_id: str, **over: object) -> dict[str, object]:
    body: dict[str, object] = {
        "from": "agent-a",
        "conversationId": "c",
        "messageId": message_id,
        "text": "hi",
    }
    return {**body, **over}


@attrs.define
class Context:
    journal: list[str]
    fail_with: Exception | None = None
    cursor: object = None
    evidence_records: list[tuple[str, dict[str, object]]] = attrs.field(factory=list)

    async def ingest(self, event: Event) -> str:
        if self.fail_with is not None:
            raise self.fail_with
        self.journal.append(f"ingest {event.locator['messageId']}")
        return "task-1"

    async def evidence(self, classification: str, record: dict[str, object]) -> None:
        self.journal.append(f"evidence {classification}")
        self.evidence_records.append((classification, record))

    async def deliver(
        self, task_id: str, operation_id: str, payload: str, send: Send, **kw: object
    ) -> str:
        return await send()

    async def load_checkpoint(self, principal: str) -> object:
        return {"cursor": self.cursor}

    async def save_checkpoint(self, principal: str, value: object) -> None:
        assert isinstance(value, dict)
        self.cursor = value["cursor"]
        self.journal.append(f"checkpoint {value['cursor']}")


@attrs.define
class Server:
    """The protocol's server side, as much as one poll needs."""

    journal: list[str]
    pages: list[list[dict[str, object]]] = attrs.field(factory=list)
    fail_acks: int = 0
    expired: bool = False
    requests: list[str] = attrs.field(factory=list)

    def handle(self, request: httpx.Request) -> httpx.Response:
        assert request.headers["Authorization"] == "Bearer tok"
        path = request.url.path.removeprefix("/agents/t")
        if path == "/v1/messages":
            after = request.url.params.get("after")
            self.requests.append(f"messages after {after}")
            if self.expired:
                body = {"error": {"code": "cursor_expired", "message": "gone"}}
                return httpx.Response(410, json=body)
            page = self.pages.pop(0) if self.pages else []
            return httpx.Response(200, json={"messages": page})
        if path == "/v1/ack":
            cursor = json.loads(request.content)["cursor"]
            self.requests.append(f"ack {cursor}")
            self.journal.append(f"ack {cursor}")
            if self.fail_acks:
                self.fail_acks -= 1
                return httpx.Response(503, json={"error": {"code": "unavailable"}})
            return httpx.Response(200, json={"acked": cursor})
        return httpx.Response(404, json={"error": {"code": "not_found", "message": path}})


async def poll(source: RelayNetSource, ctx: Context, server: Server) -> None:
    async with httpx.AsyncClient(transport=httpx.MockTransport(server.handle)) as client:
        await source.poll(ctx, RelayApi(client, URL, "tok"))


async def test_each_message_is_accepted_then_checkpointed_then_acknowledged() -> None:
    journal: list[str] = []
    ctx, source = Context(journal), RelayNetSource(URL, "tok")
    server = Server(journal, pages=[[{"cursor": "a1", "message": message("m-1")}]])
    server.pages[0].append({"cursor": "a2", "message": message("m-2")})
    await poll(source, ctx, server)
    assert journal == [
        "ingest m-1",
        "checkpoint a1",
        "ack a1",
        "ingest m-2",
        "checkpoint a2",
        "ack a2",
    ]
    assert server.requests[0] == "messages after None"


async def test_a_failed_ack_keeps_the_checkpoint_and_is_made_before_the_next_page() -> None:
    journal: list[str] = []
    ctx, source = Context(journal), RelayNetSource(URL, "tok")
    server = Server(journal, pages=[[{"cursor": "a1", "message": message("m-1")}]], fail_acks=1)
    with pytest.raises(RelayUnavailable):
        await poll(source, ctx, server)
    assert journal == ["ingest m-1", "checkpoint a1", "ack a1"] and ctx.cursor == "a1"
    await poll(source, ctx, server)
    assert server.requests[-2:] == ["ack a1", "messages after a1"]
    await poll(source, ctx, server)  # confirmed once: not acknowledged again
    assert server.requests[-1] == "messages after a1" and server.requests.count("ack a1") == 2


async def test_a_restart_acknowledges_the_stored_cursor_first() -> None:
    journal: list[str] = []
    ctx, source = Context(journal, cursor="a7"), RelayNetSource(URL, "tok")
    server = Server(journal)
    await poll(source, ctx, server)
    assert server.requests == ["ack a7", "messages after a7"]


@pytest.mark.parametrize("failure", [Overloaded("queue full"), StoreUnavailable("down")])
async def test_a_message_the_plane_cannot_take_yet_holds_the_cursor(failure: Exception) -> None:
    journal: list[str] = []
    ctx, source = Context(journal, fail_with=failure), RelayNetSource(URL, "tok")
    server = Server(journal, pages=[[{"cursor": "a1", "message": message("m-1")}]])
    with pytest.raises(_Held) as caught:
        await poll(source, ctx, server)
    assert retry_later(caught.value)
    assert journal == [] and ctx.cursor is None


async def test_malformed_and_refused_messages_are_classified_then_passed() -> None:
    journal: list[str] = []
    ctx, source = Context(journal), RelayNetSource(URL, "tok")
    page: list[dict[str, object]] = [
        {"cursor": "a1", "message": message("m-1", text="")},
        {"cursor": "a2", "message": ["not", "an", "object"]},
        {"cursor": "a3", "message": message("m-3", replyTo=7)},
        {"cursor": "a4", "message": message("m-4")},
    ]
    ctx.fail_with = DuplicateMessageId("another payload")  # only m-4 is well formed
    await poll(source, ctx, Server(journal, pages=[page]))
    assert journal == [
        "evidence malformed",
        "checkpoint a1",
        "ack a1",
        "evidence malformed",
        "checkpoint a2",
        "ack a2",
        "evidence malformed",
        "checkpoint a3",
        "ack a3",
        "evidence refused",
        "checkpoint a4",
        "ack a4",
    ]
    (first, second, third, refused) = ctx.evidence_records
    assert first[1]["cursor"] == "a1" and first[1]["messageId"] == "m-1"
    assert second[1]["messageId"] == "" and "replyTo" in str(third[1]["error"])
    assert refused[1]["messageId"] == "m-4"


async def test_a_field_the_protocol_does_not_name_is_ignored_and_the_known_ones_checked() -> None:
    journal: list[str] = []
    ctx, source = Context(journal), RelayNetSource(URL, "tok")
    page: list[dict[str, object]] = [
        {"cursor": "a1", "message": message("m-1", priority="high"), "sentAt": "2026-01-01"},
        {"cursor": "a2", "message": message("m-2", priority="high", text=5)},
    ]
    await poll(source, ctx, Server(journal, pages=[page]))
    assert journal[0] == "ingest m-1" and journal[3] == "evidence malformed"


async def test_a_bad_cursor_on_a_poll_starts_again_like_an_expired_one() -> None:
    journal: list[str] = []
    ctx, source = Context(journal, cursor="a7"), RelayNetSource(URL, "tok")

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/v1/messages"):
            body = {"error": {"code": "bad_cursor", "message": "never issued"}}
            return httpx.Response(400, json=body)
        return httpx.Response(200, json={"acked": "a7"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:
        await source.poll(ctx, RelayApi(client, URL, "tok"))
    assert ctx.cursor is None and journal == ["checkpoint None"]


async def test_an_ack_answered_2xx_with_a_body_that_is_not_json_is_done() -> None:
    async with httpx.AsyncClient(
        transport=httpx.MockTransport(lambda r: httpx.Response(200, content=b"OK\xff"))
    ) as client:
        await RelayApi(client, URL, "tok").ack("a1")


async def test_a_refusal_names_the_url_tried_and_never_the_token() -> None:
    answer = httpx.Response(404, json={"error": {"code": "not_found", "message": "no route"}})
    async with httpx.AsyncClient(transport=httpx.MockTransport(lambda r: answer)) as client:
        with pytest.raises(RelayRejected) as caught:
            await RelayApi(client, URL, "secret-token").agent()
    assert f"GET {URL}/v1/agent" in str(caught.value) and "secret-token" not in str(caught.value)


async def test_the_poll_backoff_starts_over_once_a_page_moved_on(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    journal: list[str] = []
    ctx = Context(journal)
    answers = [503, 503, "page", 503, 503]
    polls: list[float] = []

    def handle(request: httpx.Request) -> httpx.Response:
        path = request.url.path.removeprefix("/agents/t")
        if path == "/v1/agent":
            return httpx.Response(200, json={"agentId": "t"})
        if path == "/v1/ack":
            return httpx.Response(503, json={"error": {"code": "unavailable"}})
        polls.append(trio.current_time())
        answer = answers.pop(0) if answers else 503
        if answer == "page":
            page = [{"cursor": "a1", "message": message("m-1")}]
            return httpx.Response(200, json={"messages": page})
        return httpx.Response(503, json={"error": {"code": "unavailable"}})

    source = RelayNetSource(URL, "tok", transport=httpx.MockTransport(handle))
    with trio.move_on_after(20):
        await source.run(ctx)
    waits = [
        r.getMessage().rsplit("retrying in ", 1)[1]
        for r in caplog.records
        if getattr(r, "event", "") == "source_poll_failed"
    ]
    # 1 s, 2 s; then the page's cursor was saved (its ack failed): 1 s again.
    assert waits[:4] == ["1 s", "2 s", "1 s", "2 s"]
    assert journal[:2] == ["ingest m-1", "checkpoint a1"]


async def test_an_item_without_a_cursor_is_out_of_protocol_and_asked_for_again() -> None:
    journal: list[str] = []
    ctx, source = Context(journal), RelayNetSource(URL, "tok")
    pages: list[list[dict[str, object]]] = [[{"message": message("m-1")}] for _ in range(5)]
    server = Server(journal, pages=pages)
    for _ in range(3):  # limit 10, 5, 2: each a smaller page asked for at once
        await poll(source, ctx, server)
    with pytest.raises(RelayUnavailable, match="without a readable cursor"):
        await poll(source, ctx, server)  # limit 1: held, with the backoff
    assert journal == [] and ctx.cursor is None


class RawServer(Server):
    """Answers ``GET /v1/messages`` with raw bytes, one body per poll, and records
    each ``limit``."""

    bodies: list[bytes]
    limits: list[str]

    def __init__(self, journal: list[str], bodies: list[bytes]) -> None:
        super().__init__(journal)
        self.bodies = bodies
        self.limits = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/v1/messages"):
            self.limits.append(request.url.params["limit"])
            return httpx.Response(200, content=self.bodies.pop(0) if self.bodies else b"{}")
        return super().handle(request)


def _raw_item(cursor: str, message_json: bytes) -> bytes:
    return b'{"cursor": "' + cursor.encode() + b'", "message": ' + message_json + b"}"


GOOD = json.dumps(message("m-1")).encode()


@pytest.mark.parametrize(
    "bad",
    [
        b"[" * 1200 + b"]" * 1200,  # deeper than the parser's recursion limit
        b'{"from": "a", "conversationId": "c", "messageId": "m-2", "text": "\xff"}',
        b'{"from": "a", "conversationId": "c", "messageId": "m-2", "text": "\\ud800"}',
        b"[" * 70 + b"]" * 70,  # deeper than the protocol's 64
    ],
    ids=["nested-1200", "raw-ff-byte", "lone-surrogate", "nested-70"],
)
async def test_one_undecodable_item_is_malformed_and_the_rest_of_the_page_is_taken(
    bad: bytes,
) -> None:
    journal: list[str] = []
    ctx, source = Context(journal), RelayNetSource(URL, "tok")
    page = b'{"messages": [' + _raw_item("a1", GOOD) + b", " + _raw_item("a2", bad)
    page += b", " + _raw_item("a3", json.dumps(message("m-3")).encode()) + b"]}"
    await poll(source, ctx, RawServer(journal, [page]))
    assert journal == [
        "ingest m-1",
        "checkpoint a1",
        "ack a1",
        "evidence malformed",
        "checkpoint a2",
        "ack a2",
        "ingest m-3",
        "checkpoint a3",
        "ack a3",
    ]
    (record,) = (r for c, r in ctx.evidence_records if c == "malformed")
    assert record["cursor"] == "a2" and record["error"]


async def test_a_page_undecodable_as_a_whole_shrinks_the_limit_then_is_held() -> None:
    journal: list[str] = []
    ctx, source = Context(journal), RelayNetSource(URL, "tok")
    broken = b'{"messages": [' + _raw_item("a1", GOOD)[:-3]  # cut inside the item
    server = RawServer(journal, [broken] * 4 + [b'{"messages": [' + _raw_item("a1", GOOD) + b"]}"])
    for _ in range(3):
        await poll(source, ctx, server)
    with pytest.raises(RelayUnavailable):
        await poll(source, ctx, server)
    await poll(source, ctx, server)
    assert server.limits == ["10", "5", "2", "1", "1"]
    assert journal == ["ingest m-1", "checkpoint a1", "ack a1"]
    server.bodies = [b'{"messages": []}']
    await poll(source, ctx, server)  # a decoded page puts the limit back
    assert server.limits[-1] == "10"


async def test_a_page_over_the_size_limit_shrinks_the_limit() -> None:
    journal: list[str] = []
    ctx, source = Context(journal), RelayNetSource(URL, "tok")
    server = RawServer(journal, [b" " * (MAX_BODY_BYTES + 1), b'{"messages": []}'])
    await poll(source, ctx, server)
    await poll(source, ctx, server)
    assert server.limits == ["10", "5"]


async def test_an_expired_cursor_starts_again_from_the_oldest_message_not_acked() -> None:
    journal: list[str] = []
    ctx, source = Context(journal, cursor="a7"), RelayNetSource(URL, "tok")
    server = Server(journal, expired=True)
    await poll(source, ctx, server)
    assert ctx.cursor is None and journal == ["ack a7", "checkpoint None"]


@pytest.mark.parametrize(
    ("error", "later"),
    [
        (RelayUnavailable("down"), True),
        (RelayRateLimited(5), True),
        (_Held("busy"), True),
        (StoreUnavailable("down"), True),
        (RelayRejected(401, "unauthorized", "bad token"), False),
        (CursorExpired(410, "cursor_expired", ""), False),
        (DuplicateMessageId("x"), False),
    ],
)
def test_the_retry_decision_is_one_function(error: Exception, later: bool) -> None:
    assert retry_later(error) is later
    wrapped = DeliveryFailed("failed")
    wrapped.__cause__ = error
    assert retry_later(wrapped) is later


async def _answer(response: httpx.Response) -> Exception:
    async with httpx.AsyncClient(transport=httpx.MockTransport(lambda r: response)) as client:
        try:
            await RelayApi(client, URL, "tok").messages("a1")
        except Exception as exc:
            return exc
    raise AssertionError("no error")


async def test_the_client_reads_the_protocol_answers() -> None:
    limited = await _answer(httpx.Response(429, headers={"Retry-After": "7"}))
    assert isinstance(limited, RelayRateLimited) and limited.wait_s == 7
    default = await _answer(httpx.Response(429))
    assert isinstance(default, RelayRateLimited) and default.wait_s == DEFAULT_RATE_WAIT_S
    body = {"error": {"code": "cursor_expired", "message": "gone"}}
    expired = await _answer(httpx.Response(410, json=body))
    assert isinstance(expired, CursorExpired) and expired.code == "cursor_expired"
    refused = await _answer(httpx.Response(403, json={"error": {"code": "forbidden"}}))
    assert type(refused) is RelayRejected and refused.status == 403
    assert isinstance(await _answer(httpx.Response(502, text="bad gateway")), RelayUnavailable)
    assert isinstance(await _answer(httpx.Response(200, json={"items": []})), RelayUnavailable)
    assert isinstance(await _answer(httpx.Response(200, text="[" * 100_000)), RelayUnavailable)
    huge = httpx.Response(200, content=b" " * (MAX_BODY_BYTES + 1))
    too_large = await _answer(huge)
    assert isinstance(too_large, RelayUnavailable) and "exceeds" in str(too_large)


def _result(locator: dict[str, str]) -> Any:
    class _Delivery:
        delivery_id = "delivery-abc"

    class _State:
        name = "TASK_STATE_COMPLETED"

    class _Task:
        id = "task-9"

    class _Result:
        text = "done"
        delivery = _Delivery()
        task = _Task()
        state = _State()

    result = _Result()
    result.locator = locator  # type: ignore[attr-defined]
    return result


async def test_the_reply_is_posted_under_its_stable_response_id(tmp_path: Path) -> None:
    posted: list[dict[str, object]] = []
    conflict = False

    def handle(request: httpx.Request) -> httpx.Response:
        posted.append(json.loads(request.content))
        if conflict:
            return httpx.Response(409, json={"error": {"code": "response_conflict"}})
        return httpx.Response(201, json={"messageId": posted[-1]["messageId"]})

    source = RelayNetSource(URL, "tok", receipts=tmp_path)
    locator = {"from": "agent-a", "conversationId": "c", "messageId": "m-1"}
    sender = source.sender(_result(locator))
    assert sender.anchor == "response-abc"
    with pytest.raises(ProviderRejected, match="not connected"):
        await sender.send()
    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:
        source._api, source._agent = RelayApi(client, URL, "tok"), "me"
        assert await sender.send() == "response-abc"
        conflict = True
        with pytest.raises(RelayRejected, match="409 response_conflict"):
            await sender.send()
    assert posted[0] == {
        "from": "me",
        "to": "agent-a",
        "conversationId": "c",
        "messageId": "response-abc",
        "inReplyTo": "m-1",
        "taskId": "task-9",
        "state": "TASK_STATE_COMPLETED",
        "text": "done",
    }
    assert posted[1] == posted[0]  # the same body again: the server can dedupe it
    (receipt,) = [json.loads(await p.read_text()) for p in await trio.Path(tmp_path).iterdir()]
    assert receipt["state"] == "replied" and receipt["responseId"] == "response-abc"


def test_relay_url_selects_the_server_and_excludes_the_spool(tmp_path: Path) -> None:
    detected = load_sources({"RELAY_URL": URL, "RELAY_TOKEN": "tok"})
    assert detected.selected == ("relay",) and detected.relay is not None
    source = RelaySource.from_settings(detected.relay)
    assert isinstance(source, RelayNetSource) and source.url == URL
    assert "tok" not in repr(source) and "tok" not in repr(detected.relay)
    no_token = load_sources({"OUTFITTER_CHANNELS": "relay", "RELAY_URL": URL}).relay
    assert no_token is not None
    with pytest.raises(RelayConfigError, match="needs RELAY_TOKEN"):
        RelaySource.from_settings(no_token)
    both = load_sources(
        {"RELAY_URL": URL, "RELAY_TOKEN": "tok", "RELAY_SPOOL_DIR": str(tmp_path)}
    ).relay
    assert both is not None
    with pytest.raises(RelayConfigError, match="excludes RELAY_SPOOL_DIR"):
        RelaySource.from_settings(both)
    spool = load_sources({"RELAY_SPOOL_DIR": str(tmp_path), "RELAY_OUTBOX_DIR": str(tmp_path)})
    assert spool.relay is not None
    assert isinstance(RelaySource.from_settings(spool.relay), RelaySource)
