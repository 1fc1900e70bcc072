"""The agent relay over a relay server end to end: ``taskplane serve`` with
``RELAY_URL`` against a fake relay server on loopback (the protocol of
docs/sources/relay.md), with the scripted agent. A message becomes a Task, its cursor
is checkpointed and then acknowledged, the reply is posted under its stable response
ID, and crashes between the steps never make a second Task or a second response."""

from __future__ import annotations

import json
import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e._support import (
    event_names,
    kill_with_the_reply_sending,
    replies,
    serving,
    sigkill,
    sources_env,
    store_rows,
    wait_for,
    wait_for_replies,
)
from tests.e2e.fake_relay import AGENT_ID, TOKEN, FakeRelay
from tests.e2e.taskplane_proc import Spawner, TaskplaneProcess

pytestmark = pytest.mark.slow


@pytest.fixture
def relay() -> Iterator[FakeRelay]:
    yield from serving(FakeRelay())


def serve(spawn: Spawner, relay: FakeRelay, store: Path, **extra: str) -> TaskplaneProcess:
    env = sources_env(spawn, store, "relay", RELAY_URL=relay.url, RELAY_TOKEN=TOKEN, **extra)
    polls = len(relay.polls)
    process = spawn.start(("serve",), env)
    wait_for(lambda: len(relay.polls) > polls, "the first poll", process)
    return process


def checkpoint(store: Path) -> object:
    rows = store_rows(store, "SELECT value_json FROM source_checkpoints")
    return json.loads(str(rows[0][0])) if rows else None


def tasks(store: Path) -> int:
    ((count,),) = store_rows(store, "SELECT COUNT(*) FROM tasks")
    assert isinstance(count, int)
    return count


def test_a_message_becomes_a_task_its_cursor_is_acked_and_its_reply_posted_once(
    spawn: Spawner, relay: FakeRelay, tmp_path: Path
) -> None:
    store, receipts = tmp_path / "store", tmp_path / "receipts"
    receipts.mkdir()
    process = serve(spawn, relay, store, RELAY_RECEIPTS_DIR=str(receipts))
    cursor = relay.say("m-1", "hello relay server")
    wait_for(lambda: len(relay.stored()) == 1, "the response", process)
    wait_for(lambda: relay.acked_cursor() == cursor, "the ack", process)
    wait_for_replies(store, ["delivered"], "recorded", process)
    assert process.signal_and_wait(signal.SIGINT) == 0
    (answer,) = relay.stored()
    assert answer["from"] == AGENT_ID and answer["to"] == "agent-a"
    assert answer["inReplyTo"] == "m-1" and answer["conversationId"] == "conv-1"
    assert answer["state"] == "TASK_STATE_COMPLETED" and "hello relay server" in answer["text"]
    assert str(answer["messageId"]).startswith("response-")
    assert replies(store) == [("delivered", answer["messageId"])]
    assert checkpoint(store) == {"cursor": cursor}
    assert [c[2] for c in relay.response_calls] == [201]
    (receipt,) = [json.loads(p.read_text()) for p in receipts.iterdir()]
    assert receipt["state"] == "replied" and receipt["responseId"] == answer["messageId"]
    assert receipt["messageId"] == "m-1" and receipt["taskId"] == answer["taskId"]
    assert TOKEN not in process.stdout() + process.stderr()


def test_a_reply_to_a_question_continues_the_waiting_task(
    spawn: Spawner, relay: FakeRelay, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, relay, store)
    relay.say("m-1", "ask: which colour?")
    wait_for(lambda: len(relay.stored()) == 1, "the question", process)
    (question,) = relay.stored()
    assert question["state"] == "TASK_STATE_INPUT_REQUIRED"
    relay.say("m-2", "blue", replyTo=str(question["messageId"]))
    wait_for(lambda: len(relay.stored()) == 2, "the answer", process)
    process.signal_and_wait(signal.SIGINT)
    answer = next(r for r in relay.stored() if r["messageId"] != question["messageId"])
    assert answer["taskId"] == question["taskId"] and answer["inReplyTo"] == "m-2"
    assert answer["state"] == "TASK_STATE_COMPLETED"
    assert tasks(store) == 1


def test_sigkill_after_acceptance_before_the_ack_makes_no_second_task_and_the_ack_follows(
    spawn: Spawner, relay: FakeRelay, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    relay.fail_acks = 1_000  # accepted and checkpointed, but never acknowledged
    process = serve(spawn, relay, store)
    cursor = relay.say("m-1", "accepted, then killed")
    wait_for_replies(store, ["delivered"], "the reply", process)
    wait_for(lambda: checkpoint(store) == {"cursor": cursor}, "the checkpoint", process)
    wait_for(lambda: len(relay.acks) >= 2, "the owed ack retried", process)
    sigkill(process)
    assert relay.acked == 0
    relay.fail_acks = 0
    process = serve(spawn, relay, store)
    wait_for(lambda: relay.acked_cursor() == cursor, "the ack after the restart", process)
    # The poll after the restart asks from the checkpoint: the message is not offered again.
    wait_for(lambda: relay.polls[-1] == cursor, "a poll after the checkpoint", process)
    process.signal_and_wait(signal.SIGINT)
    assert tasks(store) == 1
    assert len(relay.stored()) == 1 and len(relay.response_calls) == 1


def test_sigkill_before_the_checkpoint_redelivers_the_message_as_a_duplicate(
    spawn: Spawner, relay: FakeRelay, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    relay.fail_acks = 1_000
    process = serve(spawn, relay, store)
    cursor = relay.say("m-1", "accepted, checkpoint lost")
    wait_for_replies(store, ["delivered"], "the reply", process)
    sigkill(process)
    # The state a SIGKILL leaves between the acceptance commit and the checkpoint.
    with sqlite3.connect(store / "taskplane.sqlite3") as conn:
        conn.execute("DELETE FROM source_checkpoints")
    relay.fail_acks = 0
    polls = len(relay.polls)
    process = serve(spawn, relay, store)
    assert relay.polls[polls] is None  # no checkpoint: from the oldest message not acked
    wait_for(lambda: relay.acked_cursor() == cursor, "the redelivered message acked", process)
    wait_for(lambda: checkpoint(store) == {"cursor": cursor}, "the checkpoint", process)
    process.signal_and_wait(signal.SIGINT)
    assert tasks(store) == 1
    assert len(relay.response_calls) == 1  # the duplicate's Task was already answered


def test_a_reply_left_sending_is_posted_again_under_the_same_id_and_the_server_keeps_one(
    spawn: Spawner, relay: FakeRelay, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, relay, store)
    relay.say("m-1", "answered, then left sending")
    kill_with_the_reply_sending(process, store)
    process = serve(spawn, relay, store)
    wait_for(lambda: len(relay.response_calls) == 2, "the reconciling send", process)
    wait_for_replies(store, ["delivered"], "reconciled", process)
    process.signal_and_wait(signal.SIGINT)
    (first, again) = relay.response_calls
    assert first[1] == again[1] and (first[2], again[2]) == (201, 200)  # deduplicated
    (answer,) = relay.stored()
    assert replies(store) == [("delivered", answer["messageId"])]
    assert tasks(store) == 1


def test_an_unknown_outcome_of_a_response_is_sent_again_and_deduplicated(
    spawn: Spawner, relay: FakeRelay, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    relay.fail_after_store = 1  # stored, then answered 500: the outcome is unknown
    process = serve(spawn, relay, store)
    relay.say("m-1", "this answer's fate is unknown")
    wait_for_replies(store, ["delivered"], "delivered after the retry", process)
    process.signal_and_wait(signal.SIGINT)
    assert [c[2] for c in relay.response_calls] == [500, 200]
    assert len(relay.stored()) == 1


def test_refusals_rate_limits_dropped_connections_and_failing_acks_are_retried(
    spawn: Spawner, relay: FakeRelay, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    relay.refuse_responses = 1
    relay.drop_polls = 2
    relay.fail_acks = 1
    process = serve(spawn, relay, store)
    first = relay.say("m-1", "refused once")
    wait_for(lambda: len(relay.stored()) == 1, "the first reply", process)
    wait_for(lambda: relay.acked_cursor() == first, "the first ack", process)
    relay.rate_limit_responses_s = 2
    relay.say("m-2", "rate limited once")
    wait_for(lambda: len(relay.stored()) == 2, "the second reply", process)
    wait_for_replies(store, ["delivered"] * 2, "recorded", process)
    process.signal_and_wait(signal.SIGINT)
    limited, after = [c for c in relay.response_calls if c[2] in (429, 201)][-2:]
    assert limited[2] == 429 and after[0] - limited[0] >= 1.5  # Retry-After: 2 was honoured
    assert [c[2] for c in relay.response_calls].count(400) == 1
    events = event_names(process)
    assert "delivery_failed" in events and "source_poll_failed" in events
    assert tasks(store) == 2


def test_an_expired_cursor_starts_again_from_the_oldest_message_not_acked(
    spawn: Spawner, relay: FakeRelay, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, relay, store)
    first = relay.say("m-1", "before the reset")
    wait_for(lambda: relay.acked_cursor() == first, "the first ack", process)
    relay.expire_cursor = True
    wait_for(lambda: "source_cursor_reset" in event_names(process), "the reset", process)
    relay.say("m-2", "after the reset")
    wait_for(lambda: len(relay.stored()) == 2, "the second reply", process)
    process.signal_and_wait(signal.SIGINT)
    first_after = next(n for n, after in enumerate(relay.polls) if after is not None)
    assert None in relay.polls[first_after:]  # asked again without a cursor
    assert tasks(store) == 2


def test_a_malformed_message_is_recorded_as_evidence_and_acknowledged(
    spawn: Spawner, relay: FakeRelay, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, relay, store)
    bad = relay.post({"from": "agent-a", "messageId": "m-bad", "text": "no conversation"})
    good = relay.say("m-2", "the next one is taken")
    wait_for(lambda: relay.acked_cursor() == good, "both acknowledged", process)
    wait_for(lambda: len(relay.stored()) == 1, "the good one answered", process)
    process.signal_and_wait(signal.SIGINT)
    rows = store_rows(store, "SELECT record_json FROM evidence")
    records = [json.loads(str(r[0])) for r in rows]
    (malformed,) = [r for r in records if r.get("classification") == "malformed"]
    assert malformed["cursor"] == bad and malformed["messageId"] == "m-bad"
    assert "conversationId" in malformed["error"]
    assert bad in relay.acks
    assert tasks(store) == 1


def test_a_bad_token_fails_the_explicit_start(
    spawn: Spawner, relay: FakeRelay, tmp_path: Path
) -> None:
    env = sources_env(spawn, tmp_path / "store", "relay", RELAY_URL=relay.url, RELAY_TOKEN="x")
    process = spawn.start(("serve",), env)
    assert process.wait_exit() == 2
    assert "source relay failed to start" in process.stderr()
    assert relay.polls == []
