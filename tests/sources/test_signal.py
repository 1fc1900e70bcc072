"""The Signal source in process: reading ``receive`` envelopes, the work decision, the
event it builds, the retry decision, signal-cli's send outcomes, and in virtual time
the line-by-line JSON-RPC reader (a line is handled before the next is read) and the
retained-envelope retry."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from taskplane.actors.outbound import DeliveryFailed, ProviderRejected
from taskplane.errors import DuplicateMessageId, Overloaded, PayloadTooLarge, StoreUnavailable
from taskplane.settings import load_sources
from taskplane.sources.signal import (
    Envelope,
    SignalSource,
    SignalUnavailable,
    classify,
    envelope_event,
    parse_envelope,
    retry_later,
    send_params,
)
from taskplane.sources.signal_rpc import (
    Notification,
    SignalGone,
    SignalRefused,
    SignalRpc,
    SignalUnknown,
    send_outcome,
)
from tests.support.source_context import RecordingContext

ACCOUNT = "+15550000001"
ALICE = "a1b2c3d4-0000-4000-8000-00000000a11c"


def _receive(**envelope: Any) -> dict[str, Any]:
    body = {
        "source": "+15550000002",
        "sourceNumber": "+15550000002",
        "sourceUuid": ALICE,
        "sourceName": "Alice",
        "timestamp": 1700000000000,
        "dataMessage": {"timestamp": 1700000000000, "message": "hello"},
    }
    return {"jsonrpc": "2.0", "method": "receive", "params": {"envelope": {**body, **envelope}}}


def test_a_data_message_is_read_with_its_authenticated_sender() -> None:
    envelope = parse_envelope(_receive())
    assert envelope == Envelope(ALICE, "1700000000000", "hello", sender_name="Alice")
    number_only = _receive(sourceUuid=None)
    assert parse_envelope(number_only) is not None
    assert parse_envelope(number_only).sender == "+15550000002"  # type: ignore[union-attr]
    group = _receive(
        dataMessage={
            "timestamp": 5,
            "message": "hi all",
            "groupInfo": {"groupId": "g0", "type": "DELIVER"},
            "mentions": [{"number": ACCOUNT, "start": 0, "length": 1}],
        }
    )
    read = parse_envelope(group)
    assert read is not None and read.group_id == "g0" and read.mentions == {ACCOUNT}


def test_other_envelopes_and_methods_are_named_and_unreadable_ones_refused() -> None:
    typing = _receive(dataMessage=None, typingMessage={"action": "STARTED"})
    del typing["params"]["envelope"]["dataMessage"]
    assert parse_envelope(typing) == Envelope(ALICE, "1700000000000", kind="typing")
    assert parse_envelope({"method": "receiveError", "params": {}}) is None
    with pytest.raises(ValueError, match=r"params\.envelope"):
        parse_envelope({"method": "receive", "params": {}})
    with pytest.raises(ValueError, match="sourceUuid or sourceNumber"):
        parse_envelope(_receive(sourceUuid=None, sourceNumber=None, source=None))
    with pytest.raises(ValueError, match="no timestamp"):
        parse_envelope(_receive(dataMessage={"message": "x"}, timestamp=None))


def test_work_is_a_direct_message_or_a_group_mention_with_text() -> None:
    direct = Envelope(ALICE, "1", "hello")
    assert classify(direct, ACCOUNT) == "work"
    assert classify(attrs.evolve(direct, text="  "), ACCOUNT) == "no-text"
    assert classify(attrs.evolve(direct, sender=ACCOUNT), ACCOUNT) == "own-message"
    grouped = attrs.evolve(direct, group_id="g0")
    assert classify(grouped, ACCOUNT) == "not-a-mention"
    assert classify(attrs.evolve(grouped, mentions=frozenset({ACCOUNT})), ACCOUNT) == "work"
    assert classify(Envelope(ALICE, "1", kind="receipt"), ACCOUNT) == "receipt"


def test_the_event_is_keyed_by_sender_and_timestamp_and_keeps_the_envelope() -> None:
    raw = json.dumps(_receive())
    event = envelope_event("signal:x", Envelope(ALICE, "17", "hello", sender_name="Alice"), raw)
    assert event.identity == (ALICE, "17") and event.conversation == (ALICE,)
    assert event.locator == {"sender": ALICE, "timestamp": "17"}
    assert event.parts[0].text == "Signal message from Alice in a direct message:\nhello"
    assert event.parts[1].text == raw and event.parts[1].media_type == "application/json"
    grouped = envelope_event("signal:x", Envelope(ALICE, "17", "hi", group_id="g0"), raw)
    assert grouped.conversation == (ALICE, "g0") and grouped.locator["groupId"] == "g0"


def test_a_reply_quotes_the_exact_message_to_the_sender_or_the_group() -> None:
    direct = send_params({"sender": ALICE, "timestamp": "17"}, "done")
    assert direct == {
        "message": "done",
        "quoteTimestamp": 17,
        "quoteAuthor": ALICE,
        "recipient": [ALICE],
    }
    grouped = send_params({"sender": ALICE, "timestamp": "17", "groupId": "g0"}, "done")
    assert grouped["groupId"] == "g0" and "recipient" not in grouped


@pytest.mark.parametrize(
    ("error", "later"),
    [
        (Overloaded("full"), True),
        (StoreUnavailable("down"), True),
        (SignalUnknown("no answer"), True),
        (SignalUnavailable("between processes"), True),
        (DeliveryFailed("x"), True),
        (PayloadTooLarge("big"), False),
        (DuplicateMessageId("other payload"), False),
        (SignalRefused("no"), False),
        (RuntimeError("a bug"), False),
    ],
)
def test_the_retry_decision_is_one_function(error: Exception, later: bool) -> None:
    assert retry_later(error) is later


def _result(*kinds: str) -> dict[str, Any]:
    return {"timestamp": 99, "results": [{"type": kind} for kind in kinds]}


def test_send_outcomes_follow_signal_clis_answers() -> None:
    assert send_outcome({"id": "1", "result": _result("SUCCESS")}) == _result("SUCCESS")
    assert send_outcome({"id": "1", "result": {"version": "0.13"}}) == {"version": "0.13"}
    with pytest.raises(SignalRefused, match="Invalid recipient") as refused:
        send_outcome({"id": "1", "error": {"code": -32602, "message": "Invalid recipient"}})
    assert refused.value.code == -32602 and isinstance(refused.value, ProviderRejected)
    limited = {"response": _result("RATE_LIMIT_FAILURE")}
    with pytest.raises(SignalRefused, match="RATE_LIMIT_FAILURE"):
        send_outcome({"id": "1", "error": {"code": -1, "message": "Failed", "data": limited}})
    with pytest.raises(SignalUnknown, match="NETWORK_FAILURE"):
        send_outcome({"id": "1", "result": _result("NETWORK_FAILURE")})
    with pytest.raises(SignalUnknown):
        send_outcome({"id": "1", "result": _result("NETWORK_FAILURE", "UNREGISTERED_FAILURE")})
    assert send_outcome({"id": "1", "result": _result("SUCCESS", "NETWORK_FAILURE")})


def test_settings_need_the_account_and_default_the_program() -> None:
    record = load_sources({"OUTFITTER_CHANNELS": "signal"})
    assert record.signal is not None and record.signal.program == "signal-cli"
    with pytest.raises(ValueError, match="SIGNAL_ACCOUNT"):
        SignalSource.from_settings(record.signal)
    detected = load_sources({"SIGNAL_ACCOUNT": ACCOUNT, "SIGNAL_CLI": "/opt/signal-cli"})
    assert detected.selected == ("signal",) and detected.signal is not None
    source = SignalSource.from_settings(detected.signal)
    assert (source.program, source.account, source.recovery) == (
        "/opt/signal-cli",
        ACCOUNT,
        "ambiguous",
    )


async def test_a_line_is_handled_before_the_next_is_read_and_calls_are_answered() -> None:
    to_cli, from_plane = trio.testing.memory_stream_one_way_pair()
    to_plane, from_cli = trio.testing.memory_stream_one_way_pair()
    rpc = SignalRpc(to_cli, from_cli)
    first_taken = trio.Event()
    release = trio.Event()
    seen: list[object] = []

    async def handler(message: Notification | None, line: bytes) -> None:
        seen.append(message["params"]["n"] if message else line)
        if len(seen) == 1:
            first_taken.set()
            await release.wait()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(rpc.serve, handler)
        lines = [
            {"method": "receive", "params": {"n": 1}},
            {"method": "receive", "params": {"n": 2}},
        ]
        await to_plane.send_all(
            b"".join(json.dumps(m).encode() + b"\n" for m in lines) + b"not json\n"
        )
        await first_taken.wait()
        await trio.testing.wait_all_tasks_blocked()
        assert seen == [1]  # the second line waits for the first's outcome
        release.set()
        await trio.testing.wait_all_tasks_blocked()
        assert seen == [1, 2, b"not json"]

        async def answer() -> None:
            request = json.loads(await from_plane.receive_some())
            assert request["method"] == "version"
            reply = {"jsonrpc": "2.0", "id": request["id"], "result": {"version": "0.13"}}
            await to_plane.send_all(json.dumps(reply).encode() + b"\n")

        nursery.start_soon(answer)
        assert await rpc.call("version", {}) == {"version": "0.13"}
        nursery.cancel_scope.cancel()


async def test_an_unanswered_call_is_unknown_and_a_closed_stdout_ends_the_reader(
    autojump_clock: trio.testing.MockClock,
) -> None:
    to_cli, _from_plane = trio.testing.memory_stream_one_way_pair()
    to_plane, from_cli = trio.testing.memory_stream_one_way_pair()
    rpc = SignalRpc(to_cli, from_cli, timeout_s=10.0)

    async def ignore(message: Notification | None, line: bytes) -> None:
        pass

    with pytest.raises(SignalUnknown, match="did not answer"):
        await rpc.call("send", {"message": "x"})
    assert trio.current_time() == pytest.approx(10.0)
    await to_plane.aclose()
    with pytest.raises(SignalGone):
        await rpc.serve(ignore)
    with pytest.raises(SignalUnknown, match="not running"):
        await rpc.call("send", {"message": "x"})


async def test_a_transient_failure_retries_the_retained_envelope_with_backoff(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = SignalSource("signal-cli", ACCOUNT)
    ctx = RecordingContext(refuse=[Overloaded("full"), StoreUnavailable("down")])
    await source._retained(ctx, "signal:x", Envelope(ALICE, "17", "hello"), "{}")
    assert [round(t) for t, _ in ctx.events] == [3]  # after 1 s, then 2 s
    assert ctx.checkpoint is None  # work moves no cursor: Signal has none


async def test_a_permanent_refusal_is_evidence_and_non_work_is_counted() -> None:
    source = SignalSource("signal-cli", ACCOUNT)
    ctx = RecordingContext(refuse=[PayloadTooLarge("over the limit")])
    await source._retained(ctx, "signal:x", Envelope(ALICE, "17", "hello"), "{}")
    assert ctx.evidence_kinds == ["refused"] and not ctx.events
    await source._retained(ctx, "signal:x", Envelope(ALICE, "18", kind="typing"), "{}")
    await source._retained(ctx, "signal:x", Envelope(ALICE, "19", kind="typing"), "{}")
    assert ctx.checkpoint == {"nonWork": {"typing": 2}}
    await source._handle(ctx, "signal:x", None, b"garbage")
    await source._handle(ctx, "signal:x", {"method": "receive", "params": {}}, b"{}")
    assert ctx.evidence_kinds == ["refused", "malformed", "malformed"]


async def test_a_reply_without_a_running_signal_cli_is_a_definite_refusal() -> None:
    source = SignalSource("signal-cli", ACCOUNT)
    sender = source.sender(_result_for({"sender": ALICE, "timestamp": "17"}))
    with pytest.raises(SignalRefused, match="not running"):
        await sender.send()


def _result_for(locator: dict[str, str]) -> Any:
    @attrs.frozen
    class _Result:
        locator: dict[str, str]
        text: str = "done"

    return _Result(locator)
