"""The Slack Socket Mode source end to end: ``taskplane serve`` against a fake Slack
(Web API over HTTP and real WebSocket frames) on loopback, with the scripted agent."""

from __future__ import annotations

import json
import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e._support import event_names, serving, sigkill, sources_env, store_rows, wait_for
from tests.e2e.fake_slack import APP_TOKEN, BOT_TOKEN, FakeSlack
from tests.e2e.taskplane_proc import Spawner, TaskplaneProcess

pytestmark = pytest.mark.slow

CHANNEL = "C0001"


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    yield from serving(FakeSlack())


def serve(spawn: Spawner, slack: FakeSlack, store: Path, **extra: str) -> TaskplaneProcess:
    env = sources_env(
        spawn,
        store,
        "slack",
        SLACK_APP_TOKEN=APP_TOKEN,
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_API_URL=slack.url,
        **extra,
    )
    before = slack.connections
    process = spawn.start(("serve",), env)
    wait_for(lambda: slack.connections > before, "the socket", process)
    wait_for(lambda: "channels_ready" in event_names(process), "channels_ready", process)
    return process


def delivered(store: Path) -> list[tuple[object, ...]]:
    return store_rows(store, "SELECT state, provider_response_id FROM deliveries")


def test_a_mention_is_acked_after_acceptance_and_answered_once_in_its_thread(
    spawn: Spawner, slack: FakeSlack, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, slack, store)
    envelope = slack.mention("Ev001", "summarise the incident")
    root = slack.roots[envelope]
    wait_for(lambda: envelope in slack.acks, "the ack", process)
    wait_for(lambda: len(slack.replies(CHANNEL, root)) == 1, "the reply", process)
    wait_for(lambda: [s for s, _ in delivered(store)] == ["delivered"], "delivered", process)
    (reply,) = slack.replies(CHANNEL, root)
    assert "summarise the incident" in reply["text"]
    assert reply["thread_ts"] == root
    assert reply["metadata"]["event_type"] == "ai_outfitter_delivery"
    assert reply["metadata"]["event_payload"]["delivery_id"].startswith("delivery-")
    assert delivered(store) == [("delivered", reply["ts"])]
    process.signal_and_wait(signal.SIGINT)
    assert store_rows(store, "SELECT source, state FROM tasks") == [
        ("slack", "TASK_STATE_COMPLETED")
    ]


def test_non_work_is_counted_durably_before_the_ack(
    spawn: Spawner, slack: FakeSlack, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, slack, store, SLACK_ALLOWED_CHANNELS="C0001")
    acks = [
        slack.mention("Ev010", "hello", type="message"),
        slack.mention("Ev011", "hello", type="message"),
        slack.mention("Ev012", "elsewhere", channel="C0999"),
    ]
    slack.send_raw("{not json")
    wait_for(lambda: all(a in slack.acks for a in acks), "the acks", process)
    process.signal_and_wait(signal.SIGINT)
    (value,) = store_rows(store, "SELECT value_json FROM source_checkpoints WHERE source = 'slack'")
    assert json.loads(str(value[0]))["nonWork"] == {
        "T0001/C0001/not-a-mention": 2,
        "T0001/C0999/channel-not-allowed": 1,
    }
    (evidence,) = store_rows(store, "SELECT record_json FROM evidence")
    assert json.loads(str(evidence[0]))["classification"] == "malformed"
    assert store_rows(store, "SELECT COUNT(*) FROM tasks") == [(0,)]


def test_sigkill_before_the_ack_reaches_slack_makes_no_second_task(
    spawn: Spawner, slack: FakeSlack, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, slack, store)
    slack.ignore_acks = True  # the ack is lost with the process
    root = slack.roots[slack.mention("Ev020", "once only")]
    wait_for(lambda: len(slack.replies(CHANNEL, root)) == 1, "the reply", process)
    sigkill(process)
    slack.ignore_acks = False
    process = serve(spawn, slack, store)  # Slack delivers the envelope again
    wait_for(lambda: not slack.pending, "the redelivered envelope acked", process)
    process.signal_and_wait(signal.SIGINT)
    assert store_rows(store, "SELECT COUNT(*) FROM tasks") == [(1,)]
    assert len(slack.replies(CHANNEL, root)) == 1


def test_sigkill_between_sending_and_delivered_is_reconciled_through_replies(
    spawn: Spawner, slack: FakeSlack, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, slack, store)
    root = slack.roots[slack.mention("Ev030", "reconcile me")]
    for n in range(3):  # other bot replies in the thread: the lookup must page
        slack.messages[f"{CHANNEL}/{root}"].append(
            {"type": "message", "user": "U0BOT", "text": f"other {n}", "ts": slack.next_ts()}
        )
    wait_for(lambda: [s for s, _ in delivered(store)] == ["delivered"], "delivered", process)
    sigkill(process)
    with sqlite3.connect(store / "taskplane.sqlite3") as conn:
        conn.execute("UPDATE deliveries SET state = 'sending', provider_response_id = NULL")
    posts = slack.calls.count("chat.postMessage")
    process = serve(spawn, slack, store)
    wait_for(lambda: [s for s, _ in delivered(store)] == ["delivered"], "reconciled", process)
    process.signal_and_wait(signal.SIGINT)
    assert slack.calls.count("chat.postMessage") == posts
    assert "conversations.replies" in slack.calls
    ours = [m for m in slack.replies(CHANNEL, root) if m.get("metadata")]
    assert len(ours) == 1 and delivered(store) == [("delivered", ours[0]["ts"])]


def test_a_refused_post_is_retried_and_a_dropped_answer_is_looked_up(
    spawn: Spawner, slack: FakeSlack, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    slack.refuse_posts = 1
    slack.drop_posts = 1
    process = serve(spawn, slack, store)
    root = slack.roots[slack.mention("Ev040", "try hard")]
    wait_for(lambda: [s for s, _ in delivered(store)] == ["delivered"], "delivered", process)
    assert len([m for m in slack.replies(CHANNEL, root)]) == 1
    assert slack.calls.count("chat.postMessage") == 2  # refused, then dropped (but posted)
    assert "conversations.replies" in slack.calls


def test_disconnect_envelopes_and_dropped_sockets_reconnect(
    spawn: Spawner, slack: FakeSlack, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, slack, store)
    slack.disconnect()
    wait_for(lambda: slack.connections == 2, "the reconnect after disconnect", process)
    slack.drop()
    wait_for(lambda: slack.connections == 3, "the reconnect after a drop", process)
    envelope = slack.mention("Ev050", "still there?")
    wait_for(lambda: envelope in slack.acks, "the ack on the new socket", process)
    assert slack.calls.count("apps.connections.open") == 3


def test_bad_tokens_fail_the_explicit_start(
    spawn: Spawner, slack: FakeSlack, tmp_path: Path
) -> None:
    env = sources_env(
        spawn,
        tmp_path / "store",
        "slack",
        SLACK_APP_TOKEN="xapp-wrong",
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_API_URL=slack.url,
    )
    process = spawn.start(("serve",), env)
    assert process.wait_exit() == 2
    assert "source slack failed to start" in process.stderr()


def test_a_mention_over_the_message_limit_is_refused_with_evidence_and_acked(
    spawn: Spawner, slack: FakeSlack, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, slack, store)
    big = slack.mention("Ev020", "x" * 300_000)
    small = slack.mention("Ev021", "fits")
    wait_for(lambda: big in slack.acks and small in slack.acks, "the acks", process)
    wait_for(lambda: len(slack.replies(CHANNEL, slack.roots[small])) == 1, "the reply", process)
    process.signal_and_wait(signal.SIGINT)
    (evidence,) = store_rows(
        store, "SELECT record_json FROM evidence WHERE record_type = 'source.evidence'"
    )
    record = json.loads(str(evidence[0]))
    assert record["classification"] == "refused" and record["eventId"] == "Ev020"
    assert "limit of 262144 bytes per message" in record["error"]
    assert store_rows(store, "SELECT COUNT(*) FROM tasks") == [(1,)]
    assert slack.replies(CHANNEL, slack.roots[big]) == []


def test_direct_messages_are_work_and_the_handled_reaction_marks_each_accepted_message(
    spawn: Spawner, slack: FakeSlack, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, slack, store, SLACK_HANDLED_REACTION="white_check_mark")
    mention = slack.mention("Ev060", "in the channel")
    direct = slack.direct("Ev061", "just between us")
    wait_for(lambda: mention in slack.acks and direct in slack.acks, "the acks", process)
    wait_for(lambda: len(slack.replies("D0001", slack.roots[direct])) == 1, "the DM reply", process)
    wait_for(lambda: len(slack.replies(CHANNEL, slack.roots[mention])) == 1, "the reply", process)
    process.signal_and_wait(signal.SIGINT)
    assert sorted((r["channel"], r["timestamp"]) for r in slack.reactions) == sorted(
        [(CHANNEL, slack.roots[mention]), ("D0001", slack.roots[direct])]
    )
    assert {r["name"] for r in slack.reactions} == {"white_check_mark"}
    (reply,) = slack.replies("D0001", slack.roots[direct])
    assert "just between us" in reply["text"] and "direct message" in reply["text"]
    handled = store_rows(store, "SELECT state FROM deliveries WHERE operation_id LIKE 'handled:%'")
    assert handled == [("delivered",), ("delivered",)]
    assert store_rows(store, "SELECT COUNT(*) FROM tasks") == [(2,)]


def test_a_failed_handled_reaction_leaves_the_envelope_unacked_until_it_succeeds(
    spawn: Spawner, slack: FakeSlack, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    slack.fail_reactions = 1
    process = serve(spawn, slack, store, SLACK_HANDLED_REACTION="white_check_mark")
    envelope = slack.direct("Ev070", "react to me")
    wait_for(lambda: slack.reaction_calls == 1, "the failed reaction", process)
    assert envelope not in slack.acks
    slack.drop()  # Slack delivers the unacknowledged envelope again on the new socket
    wait_for(lambda: envelope in slack.acks, "the ack after the retry", process)
    process.signal_and_wait(signal.SIGINT)
    assert len(slack.reactions) == 1
    assert store_rows(store, "SELECT COUNT(*) FROM tasks") == [(1,)]
