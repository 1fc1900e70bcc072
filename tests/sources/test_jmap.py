"""The JMAP email source in process: session and push parsing, the non-work
classification, the event and the reply it builds, the retry decision, and the sync
against the fake server's model (through ``httpx.MockTransport``) in virtual time."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import httpx
import pytest
import trio

from taskplane.actors.outbound import DeliveryFailed
from taskplane.errors import DuplicateMessageId, Overloaded, PayloadTooLarge
from taskplane.model.limits import MAX_MESSAGE_BYTES
from taskplane.settings import ConfigError, load_sources
from taskplane.sources.base import Event
from taskplane.sources.identity import source_identifier
from taskplane.sources.jmap import Checkpoint, JmapSource, classify, email_event, retry_later
from taskplane.sources.jmap_api import (
    JmapApi,
    JmapMethodError,
    JmapRateLimited,
    JmapRejected,
    JmapUnavailable,
    auth_headers,
    chunks,
    parse_session,
    state_change,
)
from taskplane.sources.jmap_reply import (
    DELIVERY_HEADER,
    Connection,
    Identity,
    Mailboxes,
    connect,
    reply_email,
)
from tests.e2e.fake_jmap import ACCOUNT, ARCHIVE, INBOX, TOKEN, MailModel, authorized

BASE = "https://jmap.test"
SESSION_URL = f"{BASE}/.well-known/jmap"
PRINCIPAL = source_identifier("jmap", SESSION_URL, "bot@example.com")


# ---- parsing and decisions -----------------------------------------------------------


def test_the_session_names_the_mail_account_its_limit_and_resolves_urls() -> None:
    document = MailModel(max_objects_in_get=7).session(BASE)
    document["apiUrl"] = "/api/"
    session = parse_session(document, SESSION_URL)
    assert (session.account_id, session.max_objects_in_get) == (ACCOUNT, 7)
    assert session.api_url == f"{BASE}/api/"
    del document["capabilities"]["urn:ietf:params:jmap:core"]["maxObjectsInGet"]
    assert parse_session(document, SESSION_URL).max_objects_in_get == 256
    with pytest.raises(JmapRejected, match="no primary mail account"):
        parse_session({**document, "primaryAccounts": {}}, SESSION_URL)


def test_a_state_change_is_read_for_the_mail_account_only() -> None:
    change = {"@type": "StateChange", "changed": {ACCOUNT: {"Email": "9", "Mailbox": "3"}}}
    assert state_change(json.dumps(change), ACCOUNT) == {"Email": "9", "Mailbox": "3"}
    assert state_change(json.dumps(change), "other") is None
    assert state_change(json.dumps({"@type": "Ping", "interval": 30}), ACCOUNT) is None
    assert state_change("not json", ACCOUNT) is None


def test_ids_are_read_in_chunks_of_max_objects_in_get() -> None:
    assert chunks(["a", "b", "c", "d", "e"], 2) == [["a", "b"], ["c", "d"], ["e"]]
    assert chunks([], 2) == []


def test_only_inbox_mail_that_is_not_a_draft_or_our_reply_is_work() -> None:
    assert classify({"mailboxIds": {INBOX: True}, "keywords": {}}, INBOX) == "work"
    assert classify({"mailboxIds": {ARCHIVE: True}}, INBOX) == "not-in-inbox"
    assert classify({"mailboxIds": {INBOX: True}, "keywords": {"$draft": True}}, INBOX) == "draft"
    mine = {"mailboxIds": {INBOX: True}, f"header:{DELIVERY_HEADER}:asText": "delivery-1"}
    assert classify(mine, INBOX) == "own-reply"


def _email(**over: Any) -> dict[str, Any]:
    email = {
        "id": "M1",
        "threadId": "T1",
        "mailboxIds": {INBOX: True},
        "from": [{"name": "Alice", "email": "alice@example.org"}],
        "replyTo": None,
        "subject": "Budget",
        "messageId": ["m1@example.org"],
        "references": ["m0@example.org"],
        "textBody": [{"partId": "1", "type": "text/plain"}],
        "bodyValues": {"1": {"value": "How much is left?", "isTruncated": False}},
    }
    return {**email, **over}


def test_an_inbox_message_is_an_event_keyed_by_account_email_and_thread() -> None:
    event = email_event(PRINCIPAL, ACCOUNT, _email())
    assert event.identity == (ACCOUNT, "M1") and event.conversation == ("T1",)
    assert event.parts[0].text is not None and "How much is left?" in event.parts[0].text
    assert event.locator["replyTo"] == "alice@example.org"
    assert event.locator["references"] == "m0@example.org"
    reply_to = email_event(PRINCIPAL, ACCOUNT, _email(replyTo=[{"email": "list@example.org"}]))
    assert reply_to.locator["replyTo"] == "list@example.org"


def test_a_truncated_body_or_no_sender_is_set_aside_not_cut() -> None:
    truncated = {"1": {"value": "x", "isTruncated": True}}
    with pytest.raises(ValueError, match=f"limit of {MAX_MESSAGE_BYTES} bytes"):
        email_event(PRINCIPAL, ACCOUNT, _email(bodyValues=truncated))
    with pytest.raises(ValueError, match="no sender"):
        email_event(PRINCIPAL, ACCOUNT, _email(**{"from": None}))


def test_the_reply_is_threaded_carries_the_delivery_id_and_is_a_draft() -> None:
    locator = email_event(PRINCIPAL, ACCOUNT, _email()).locator
    identity = Identity("id-bot", "bot@example.com", "Task Bot")
    reply = reply_email(identity, Mailboxes(INBOX, "drafts", "sent"), locator, "42", "delivery-x")
    assert reply["subject"] == "Re: Budget" and reply["to"] == [{"email": "alice@example.org"}]
    assert reply["inReplyTo"] == ["m1@example.org"]
    assert reply["references"] == ["m0@example.org", "m1@example.org"]
    assert reply[f"header:{DELIVERY_HEADER}:asText"] == "delivery-x"
    assert reply["mailboxIds"] == {"drafts": True} and reply["keywords"]["$draft"]
    again = reply_email(identity, Mailboxes(INBOX), {**locator, "subject": "RE: x"}, "", "d")
    assert again["subject"] == "RE: x"


@pytest.mark.parametrize(
    ("error", "later"),
    [
        (JmapUnavailable("502"), True),
        (JmapRateLimited(5), True),
        (Overloaded("full"), True),
        (JmapRejected("403"), False),
        (JmapMethodError("Email/get", "forbidden"), False),
        (PayloadTooLarge("too big"), False),
        (DuplicateMessageId("changed"), False),
        (DeliveryFailed("no"), True),
    ],
)
def test_the_retry_decision_is_one_function(error: Exception, later: bool) -> None:
    assert retry_later(error) is later


def test_credentials_are_basic_or_bearer() -> None:
    assert authorized(auth_headers(None, None, TOKEN)["Authorization"])
    assert authorized(auth_headers("bot@example.com", "correct horse", None)["Authorization"])


def test_settings_need_the_url_and_a_credential_and_auto_detect_by_the_url() -> None:
    with pytest.raises(ValueError, match="JMAP_TOKEN, or JMAP_USERNAME and JMAP_PASSWORD"):
        record = load_sources({"OUTFITTER_CHANNELS": "jmap", "JMAP_USERNAME": "u"}).jmap
        assert record is not None
        JmapSource.from_settings(record)
    detected = load_sources({"JMAP_SESSION_URL": SESSION_URL + "/", "JMAP_TOKEN": "t"})
    assert detected.selected == ("jmap",) and detected.jmap is not None
    assert detected.jmap.session_url == SESSION_URL
    with pytest.raises(ConfigError, match="JMAP_SESSION_URL"):
        load_sources({"OUTFITTER_CHANNELS": "jmap", "JMAP_SESSION_URL": "ftp://x"})


# ---- the sync against the model ------------------------------------------------------


@attrs.define
class FakeContext:
    """The plane as the source sees it: dedupe by identity, checkpoints, evidence."""

    tasks: dict[tuple[str, ...], str] = attrs.field(factory=dict)
    events: list[Event] = attrs.field(factory=list)
    evidence_records: list[tuple[str, dict[str, object]]] = attrs.field(factory=list)
    checkpoints: dict[str, object] = attrs.field(factory=dict)
    refuse: list[Exception] = attrs.field(factory=list)

    async def ingest(self, event: Event) -> str:
        if self.refuse:
            raise self.refuse.pop(0)
        self.events.append(event)
        return self.tasks.setdefault(event.identity, f"task-{len(self.tasks)}")

    async def evidence(self, classification: str, record: dict[str, object]) -> None:
        self.evidence_records.append((classification, record))

    async def deliver(self, *args: object, **kwargs: object) -> str:
        raise AssertionError("the email source acknowledges nothing")

    async def load_checkpoint(self, principal: str) -> object:
        return self.checkpoints.get(principal)

    async def save_checkpoint(self, principal: str, value: object) -> None:
        self.checkpoints[principal] = json.loads(json.dumps(value))

    def state(self) -> str | None:
        return Checkpoint.of(self.checkpoints.get(PRINCIPAL), ACCOUNT).state


@attrs.define
class Server:
    model: MailModel
    fail_next: list[int] = attrs.field(factory=list)  # HTTP statuses for the next posts

    def handle(self, request: httpx.Request) -> httpx.Response:
        if not authorized(request.headers.get("Authorization")):
            return httpx.Response(401, json={"type": "about:blank", "status": 401})
        if request.method == "GET":
            return httpx.Response(200, json=self.model.session(BASE))
        if self.fail_next:
            status = self.fail_next.pop(0)
            return httpx.Response(status, headers={"Retry-After": "7"}, json={"status": status})
        return httpx.Response(200, json=self.model.handle(json.loads(request.content)))


@asynccontextmanager
async def connected(server: Server) -> AsyncIterator[Connection]:
    transport = httpx.MockTransport(server.handle)
    async with httpx.AsyncClient(transport=transport) as client:
        api = JmapApi(client, auth_headers(None, None, TOKEN))
        yield await connect(api, await api.session(SESSION_URL))


async def test_the_first_sync_starts_at_the_current_state_then_takes_new_inbox_mail() -> None:
    model = MailModel(max_objects_in_get=2)
    model.deliver("before", "not work: already there")
    ctx, source = FakeContext(), JmapSource(SESSION_URL, token=TOKEN, max_changes=2)
    async with connected(Server(model)) as conn:
        await source.sync(ctx, conn, PRINCIPAL)
        assert ctx.events == [] and ctx.state() == str(model.state)
        for n in range(3):
            model.deliver(f"q{n}", "work")
        model.deliver("elsewhere", "not work", mailbox=ARCHIVE)
        await source.sync(ctx, conn, PRINCIPAL)
    assert [e.locator["subject"] for e in ctx.events] == ["q0", "q1", "q2"]
    assert ctx.state() == str(model.state)
    assert len(model.method_calls("Email/changes")) == 2  # four changes: two pages of two
    assert Checkpoint.of(ctx.checkpoints[PRINCIPAL], ACCOUNT).non_work == {"not-in-inbox": 1}


async def test_an_overloaded_plane_holds_the_checkpoint_and_the_retry_takes_the_item() -> None:
    model = MailModel()
    ctx, source = FakeContext(), JmapSource(SESSION_URL, token=TOKEN)
    async with connected(Server(model)) as conn:
        await source.sync(ctx, conn, PRINCIPAL)
        before = ctx.state()
        model.deliver("q", "work")
        ctx.refuse.append(Overloaded("the queue is full"))
        with pytest.raises(Exception) as raised:
            await source.sync(ctx, conn, PRINCIPAL)
        assert retry_later(raised.value) and ctx.state() == before
        await source.sync(ctx, conn, PRINCIPAL)
    assert [e.locator["subject"] for e in ctx.events] == ["q"] and ctx.state() != before


async def test_a_permanent_refusal_is_evidence_and_the_checkpoint_advances() -> None:
    model = MailModel()
    ctx, source = FakeContext(), JmapSource(SESSION_URL, token=TOKEN)
    async with connected(Server(model)) as conn:
        await source.sync(ctx, conn, PRINCIPAL)
        model.deliver("huge", "body")
        ctx.refuse.append(PayloadTooLarge("over the limit"))
        await source.sync(ctx, conn, PRINCIPAL)
    assert ctx.state() == str(model.state)
    assert [c for c, _ in ctx.evidence_records] == ["refused"]


async def test_a_server_error_holds_and_a_rate_limit_says_how_long() -> None:
    model = MailModel()
    server = Server(model)
    ctx, source = FakeContext(), JmapSource(SESSION_URL, token=TOKEN)
    async with connected(server) as conn:
        await source.sync(ctx, conn, PRINCIPAL)
        before = ctx.state()
        model.deliver("q", "work")
        server.fail_next = [503]
        with pytest.raises(JmapUnavailable):
            await source.sync(ctx, conn, PRINCIPAL)
        server.fail_next = [429]
        with pytest.raises(JmapRateLimited) as limited:
            await source.sync(ctx, conn, PRINCIPAL)
        assert limited.value.wait_s == 7 and ctx.state() == before


async def test_cannot_calculate_changes_records_resync_and_takes_the_inbox_again() -> None:
    model = MailModel()
    ctx, source = FakeContext(), JmapSource(SESSION_URL, token=TOKEN)
    async with connected(Server(model)) as conn:
        await source.sync(ctx, conn, PRINCIPAL)
        model.deliver("lost", "work")
        model.forget_changes()
        await source.sync(ctx, conn, PRINCIPAL)
        await source.sync(ctx, conn, PRINCIPAL)  # from the reset state: nothing new
    assert [c for c, _ in ctx.evidence_records] == ["resync"]
    assert [e.locator["subject"] for e in ctx.events] == ["lost"]


async def test_the_reply_is_sent_once_and_found_again_by_its_header() -> None:
    model = MailModel()
    model.refuse_submissions = 1
    ctx, source = FakeContext(), JmapSource(SESSION_URL, token=TOKEN)
    async with connected(Server(model)) as conn:
        await source.sync(ctx, conn, PRINCIPAL)
        model.deliver("q", "work")
        await source.sync(ctx, conn, PRINCIPAL)
        source._conn = conn
        locator = ctx.events[0].locator
        sender = source.sender(_result(locator, "delivery-abc"))
        assert await sender.reconcile() is None  # type: ignore[misc]
        with pytest.raises(JmapRejected, match="forbiddenToSend"):
            await sender.send()
        email_id = await sender.send()  # the draft of the refused submission
        assert await sender.send() == email_id  # already sent: found, not sent again
        assert await sender.reconcile() == email_id  # type: ignore[misc]
    assert [s["deliveryId"] for s in model.sent()] == ["delivery-abc"]
    assert len([c for c in model.method_calls("Email/set") if c.get("create")]) == 1


def _result(locator: Any, delivery_id: str) -> Any:
    @attrs.frozen
    class _Delivery:
        delivery_id: str

    @attrs.frozen
    class _Result:
        locator: Any
        delivery: _Delivery
        text: str = "the answer"

    return _Result(locator, _Delivery(delivery_id))


async def test_the_event_source_nudges_on_open_and_on_email_states_then_reconnects(
    autojump_clock: trio.testing.MockClock,
) -> None:
    change = {"@type": "StateChange", "changed": {ACCOUNT: {"Email": "5"}}}
    other = {"@type": "StateChange", "changed": {ACCOUNT: {"Mailbox": "2"}}}
    body = (
        'event: ping\ndata: {"interval": 30}\n\n'
        f"event: state\ndata: {json.dumps(change)}\n\n"
        f"event: state\ndata: {json.dumps(other)}\n\n"
    )
    opened: list[float] = []

    def handle(request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and "eventsource" in request.url.path:
            opened.append(trio.current_time())
            headers = {"Content-Type": "text/event-stream"}
            return httpx.Response(200, headers=headers, content=body.encode())
        return Server(MailModel()).handle(request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:
        api = JmapApi(client, auth_headers(None, None, TOKEN))
        conn = await connect(api, await api.session(SESSION_URL))
        tx, rx = trio.open_memory_channel[None](1)
        nudges = 0
        source = JmapSource(SESSION_URL, token=TOKEN)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(source._listen, conn, tx)
            with trio.move_on_after(3.5):
                async for _ in rx:
                    nudges += 1
            nursery.cancel_scope.cancel()
    assert [round(t) for t in opened] == [0, 1, 3]  # reconnects back off 1 s, 2 s
    assert nudges >= 3
