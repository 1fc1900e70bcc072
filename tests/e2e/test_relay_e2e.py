"""The agent relay end to end: ``taskplane serve`` with a filesystem spool and the
scripted agent. A file in the inbox becomes a Task, its result is written once to the
outbox, and crashes between the steps never make a second Task or a second reply."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import sqlite3
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e._support import event_names, logged, sigkill, store_rows, wait_for
from tests.e2e.taskplane_proc import RunningServer, Spawner, write_credentials

pytestmark = pytest.mark.slow


class Relay:
    def __init__(self, root: Path) -> None:
        self.spool = root / "spool"
        self.outbox = root / "outbox"
        self.store = root / "store"
        self.spool.mkdir()
        self.outbox.mkdir()

    def drop(self, name: str, body: dict[str, object]) -> None:
        tmp = self.spool / f".{name}.tmp"
        tmp.write_text(json.dumps(body))
        os.rename(tmp, self.spool / name)

    def env(self) -> dict[str, str]:
        """The variables that run the relay over this spool, outbox and store."""
        return {
            "CHANNELS_TASK_STORE_PATH": str(self.store),
            "OUTFITTER_CHANNELS": "relay",
            "RELAY_SPOOL_DIR": str(self.spool),
            "RELAY_OUTBOX_DIR": str(self.outbox),
        }

    def replies(self) -> list[dict[str, object]]:
        return [
            json.loads(p.read_text())
            for p in sorted(self.outbox.iterdir())
            if not p.name.startswith(".")
        ]


def serve(spawn: Spawner, relay: Relay) -> RunningServer:
    """``taskplane serve`` with the relay and the A2A listener; waits for its card."""
    return spawn.serve(
        store=relay.store, token="relay-token-0123", principal="op", extra_env=relay.env()
    )


def event(message_id: str, text: str, **extra: str) -> dict[str, object]:
    return {
        "from": "agent-a",
        "conversationId": "conv-1",
        "messageId": message_id,
        "text": text,
        **extra,
    }


def test_a_spool_file_becomes_a_task_and_its_reply_is_written_once(
    spawn: Spawner, tmp_path: Path
) -> None:
    relay = Relay(tmp_path)
    relay.drop("001.json", event("m-1", "hello relay"))
    server = serve(spawn, relay)
    wait_for(lambda: len(relay.replies()) == 1, "the reply file", server.process)
    (reply,) = relay.replies()
    assert reply["text"] == "hello relay" or "hello relay" in str(reply["text"])
    assert reply["state"] == "TASK_STATE_COMPLETED"
    assert reply["inReplyTo"] == "m-1" and reply["conversationId"] == "conv-1"
    assert not (relay.spool / "001.json").exists()
    events = logged(server.process, "source_started", "wakes_replayed")
    assert events.index("source_started") < events.index("wakes_replayed")
    wait_for(
        lambda: store_rows(relay.store, "SELECT state FROM deliveries") == [("delivered",)],
        "the delivered record",
        server.process,
    )
    assert server.process.signal_and_wait(signal.SIGINT) == 0
    rows = store_rows(relay.store, "SELECT state, provider_response_id FROM deliveries")
    assert rows == [("delivered", reply["messageId"])]


def test_a_reply_to_a_question_continues_the_waiting_task(spawn: Spawner, tmp_path: Path) -> None:
    relay = Relay(tmp_path)
    relay.drop("001.json", event("m-1", "ask: which colour?"))
    server = serve(spawn, relay)
    wait_for(lambda: len(relay.replies()) == 1, "the question", server.process)
    (question,) = relay.replies()
    assert question["state"] == "TASK_STATE_INPUT_REQUIRED"
    relay.drop("002.json", event("m-2", "blue", replyTo=str(question["messageId"])))
    wait_for(lambda: len(relay.replies()) == 2, "the answer", server.process)
    answer = next(r for r in relay.replies() if r["messageId"] != question["messageId"])
    assert answer["taskId"] == question["taskId"]
    assert answer["state"] == "TASK_STATE_COMPLETED"
    assert store_rows(relay.store, "SELECT COUNT(*) FROM tasks") == [(1,)]


def test_a_malformed_file_is_set_aside_with_evidence(spawn: Spawner, tmp_path: Path) -> None:
    relay = Relay(tmp_path)
    (relay.spool / "bad.json").write_text('{"from": "agent-a"}')
    server = serve(spawn, relay)
    wait_for(lambda: (relay.spool / "malformed" / "bad.json").exists(), "set aside", server.process)
    server.process.signal_and_wait(signal.SIGINT)
    rows = store_rows(relay.store, "SELECT record_type, record_json FROM evidence")
    assert [r[0] for r in rows] == ["source.evidence"]
    assert json.loads(str(rows[0][1]))["classification"] == "malformed"
    assert store_rows(relay.store, "SELECT COUNT(*) FROM tasks") == [(0,)]


def test_sigkill_after_acceptance_before_the_file_is_removed_makes_no_second_task(
    spawn: Spawner, tmp_path: Path
) -> None:
    relay = Relay(tmp_path)
    body = event("m-1", "hello once")
    relay.drop("001.json", body)
    server = serve(spawn, relay)
    wait_for(lambda: len(relay.replies()) == 1, "the reply", server.process)
    sigkill(server.process)
    # The state a SIGKILL leaves between the acceptance commit and the unlink: the
    # accepted file is still in the spool.
    relay.drop("001.json", body)
    server = serve(spawn, relay)
    wait_for(
        lambda: not (relay.spool / "001.json").exists(), "the redelivered file", server.process
    )
    server.process.signal_and_wait(signal.SIGINT)
    assert store_rows(relay.store, "SELECT COUNT(*) FROM tasks") == [(1,)]
    assert len(relay.replies()) == 1


@pytest.mark.parametrize("written", [True, False], ids=["reply-written", "reply-not-written"])
def test_sigkill_between_sending_and_delivered_is_reconciled_without_a_second_reply(
    spawn: Spawner, tmp_path: Path, written: bool
) -> None:
    relay = Relay(tmp_path)
    relay.drop("001.json", event("m-1", "hello reconcile"))
    server = serve(spawn, relay)
    wait_for(lambda: len(relay.replies()) == 1, "the reply", server.process)
    sigkill(server.process)
    # The state a SIGKILL leaves between the `sending` commit and the `delivered`
    # commit: the record says sending, the file is there or not yet.
    with sqlite3.connect(relay.store / "taskplane.sqlite3") as conn:
        conn.execute("UPDATE deliveries SET state = 'sending', provider_response_id = NULL")
    (path,) = [p for p in relay.outbox.iterdir() if not p.name.startswith(".")]
    if not written:
        path.unlink()
    server = serve(spawn, relay)
    wait_for(
        lambda: store_rows(relay.store, "SELECT state FROM deliveries") == [("delivered",)],
        "reconciliation",
        server.process,
    )
    server.process.signal_and_wait(signal.SIGINT)
    assert [p.name for p in relay.outbox.iterdir() if not p.name.startswith(".")] == [path.name]
    assert store_rows(relay.store, "SELECT COUNT(*) FROM tasks") == [(1,)]


def test_an_explicit_source_that_cannot_start_stops_the_process(
    spawn: Spawner, tmp_path: Path
) -> None:
    relay = Relay(tmp_path)
    relay.outbox.rmdir()
    env = spawn.env(A2A_SERVER="0", **relay.env())  # the native sources alone, no listener
    process = spawn.start(("serve",), env)
    assert process.wait_exit() == 2
    assert "source relay failed to start" in process.stderr()
    assert "source_start_failed" in event_names(process)


def test_a2a_still_answers_with_the_relay_running(spawn: Spawner, tmp_path: Path) -> None:
    relay = Relay(tmp_path)
    server = serve(spawn, relay)
    response = httpx.post(
        server.url + "/message:send",
        headers=server.auth_headers(),
        json={"message": {"messageId": "a-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}},
        timeout=10,
    )
    assert response.status_code == 200
    assert relay.replies() == []


def test_reply_anchor_conditions_through_the_relay(spawn: Spawner, tmp_path: Path) -> None:
    """Gates "anchor continuation from INPUT_REQUIRED and AUTH_REQUIRED only via the
    direct anchor", "any missing anchor condition -> new Task", "foreign-principal
    anchor -> new Task" and "native sink rejects explicit taskId", through a source."""
    relay = Relay(tmp_path)
    server = serve(spawn, relay)

    def reply_to(message_id: str) -> dict[str, object]:
        wait_for(
            lambda: any(r["inReplyTo"] == message_id for r in relay.replies()),
            f"the reply to {message_id}",
            server.process,
        )
        return next(r for r in relay.replies() if r["inReplyTo"] == message_id)

    relay.drop("001.json", event("m-1", "auth: sign in please"))
    auth = reply_to("m-1")
    assert auth["state"] == "TASK_STATE_AUTH_REQUIRED"
    # Another agent answering the question starts its own Task (condition 5).
    foreign = {**event("m-2", "done", replyTo=str(auth["messageId"])), "from": "agent-b"}
    relay.drop("002.json", foreign)
    assert reply_to("m-2")["taskId"] != auth["taskId"]
    # The asking agent's direct reply continues it.
    relay.drop("003.json", event("m-3", "signed in", replyTo=str(auth["messageId"])))
    assert reply_to("m-3")["taskId"] == auth["taskId"]
    # A reply to a finished Task's answer is a new Task in the same conversation.
    relay.drop("004.json", event("m-4", "thanks", replyTo=str(reply_to("m-3")["messageId"])))
    assert reply_to("m-4")["taskId"] != auth["taskId"]
    # A taskId field is not part of the format: the file is set aside, nothing continues.
    bad = {**event("m-5", "continue it"), "taskId": auth["taskId"]}
    relay.drop("005.json", bad)
    wait_for(lambda: (relay.spool / "malformed" / "005.json").exists(), "set aside", server.process)
    server.process.signal_and_wait(signal.SIGINT)
    contexts = store_rows(
        relay.store, "SELECT principal, COUNT(DISTINCT context_id) FROM tasks GROUP BY 1"
    )
    assert sorted(n for _, n in contexts) == [1, 1]
    assert store_rows(relay.store, "SELECT COUNT(*) FROM tasks") == [(3,)]


def test_a_listener_that_cannot_bind_keeps_the_sources_running(
    spawn: Spawner, tmp_path: Path
) -> None:
    relay = Relay(tmp_path)
    with socket.create_server(("127.0.0.1", 0)) as busy:
        credentials = write_credentials(tmp_path / "credentials.json", [("t-0123456789", "op")])
        env = spawn.env(
            A2A_SERVER="1",
            A2A_CREDENTIALS_PATH=str(credentials),
            A2A_HOST="127.0.0.1",
            A2A_PORT=str(busy.getsockname()[1]),
            **relay.env(),
        )
        process = spawn.start(("serve",), env)
        relay.drop("001.json", event("m-1", "no listener needed"))
        wait_for(relay.replies, "the reply", process)
        events = logged(process, "listener_start_failed")
        assert "listener_start_failed" in events and "a2a_server_started" not in events
        assert process.signal_and_wait(signal.SIGINT) == 0


def test_random_sigkills_never_lose_or_duplicate_a_relay_message(
    spawn: Spawner, tmp_path: Path
) -> None:
    """SIGKILL at random moments while a spool of messages is taken and answered;
    after a final clean run every message has exactly one Task and one reply file."""
    seed = int(os.environ.get("RELAY_DRILL_SEED") or random.randrange(2**32))
    rng = random.Random(seed)
    relay = Relay(tmp_path)
    count = 24
    for n in range(count):
        relay.drop(f"{n:03d}.json", event(f"m-{n}", f"message {n}"))
    for _ in range(4):
        server = serve(spawn, relay)
        time.sleep(rng.uniform(0.0, 0.8))
        sigkill(server.process)
    server = serve(spawn, relay)
    wait_for(lambda: len(relay.replies()) >= count, f"all replies (seed {seed})", server.process)
    wait_for(
        lambda: (
            store_rows(relay.store, "SELECT COUNT(*) FROM deliveries WHERE state = 'delivered'")
            == [(count,)]
        ),
        f"all deliveries recorded (seed {seed})",
        server.process,
    )
    assert server.process.signal_and_wait(signal.SIGINT) == 0
    replies = relay.replies()
    assert sorted(str(r["inReplyTo"]) for r in replies) == sorted(f"m-{n}" for n in range(count))
    assert len({r["taskId"] for r in replies}) == count, f"seed {seed}"
    assert store_rows(relay.store, "SELECT COUNT(*) FROM tasks") == [(count,)], f"seed {seed}"
    assert [p.name for p in relay.spool.iterdir()] == ["malformed"]


def set_aside_evidence(relay: Relay) -> dict[str, dict[str, object]]:
    rows = store_rows(
        relay.store, "SELECT record_json FROM evidence WHERE record_type = 'source.evidence'"
    )
    records = [json.loads(str(r[0])) for r in rows]
    return {str(r["file"]): r for r in records}


def test_entries_that_are_not_regular_files_are_set_aside_and_the_relay_keeps_going(
    spawn: Spawner, tmp_path: Path
) -> None:
    """A directory, a symlink (never followed, even to a valid event) and a fifo in the
    spool are set aside with evidence; a valid file dropped afterwards is answered and
    the relay never crashes."""
    relay = Relay(tmp_path)
    server = serve(spawn, relay)
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps(event("m-outside", "read through a link")))
    (relay.spool / "z13.json").mkdir()
    (relay.spool / "m14.json").symlink_to(outside)
    os.mkfifo(relay.spool / "f15.json")
    aside = relay.spool / "malformed"
    wait_for(
        lambda: all(os.path.lexists(aside / n) for n in ("z13.json", "m14.json", "f15.json")),
        "the three entries set aside",
        server.process,
    )
    relay.drop("z99.json", event("m-1", "still taken"))
    wait_for(lambda: len(relay.replies()) == 1, "the reply to the valid file", server.process)
    assert relay.replies()[0]["inReplyTo"] == "m-1"
    assert (aside / "z13.json").is_dir() and (aside / "m14.json").is_symlink()
    assert outside.exists()
    events = event_names(server.process)
    assert "actor_crashed" not in events and "channels_unhealthy" not in events
    assert httpx.get(server.url + "/readyz").status_code == 200
    server.process.signal_and_wait(signal.SIGINT)
    evidence = set_aside_evidence(relay)
    assert {n: e["classification"] for n, e in evidence.items()} == {
        "z13.json": "malformed",
        "m14.json": "malformed",
        "f15.json": "malformed",
    }
    assert "a directory" in str(evidence["z13.json"]["error"])
    assert "symbolic link" in str(evidence["m14.json"]["error"])
    assert "fifo" in str(evidence["f15.json"]["error"])
    assert store_rows(relay.store, "SELECT COUNT(*) FROM tasks") == [(1,)]


def test_a_relay_event_over_the_message_limit_is_set_aside(spawn: Spawner, tmp_path: Path) -> None:
    relay = Relay(tmp_path)
    relay.drop("001.json", event("m-1", "x" * 2_000_000))  # also over the file limit
    relay.drop("002.json", event("m-2", "y" * 300_000))  # under the file limit only
    relay.drop("003.json", event("m-3", "fits"))
    server = serve(spawn, relay)
    wait_for(lambda: len(relay.replies()) == 1, "the reply to the small file", server.process)
    aside = relay.spool / "malformed"
    wait_for(lambda: (aside / "002.json").exists(), "both set aside", server.process)
    server.process.signal_and_wait(signal.SIGINT)
    assert (aside / "001.json").exists()
    evidence = set_aside_evidence(relay)
    assert "limit of 1048576 bytes" in str(evidence["001.json"]["error"])
    assert "limit of 262144 bytes per message" in str(evidence["002.json"]["error"])
    assert store_rows(relay.store, "SELECT COUNT(*) FROM tasks") == [(1,)]


def test_a_stopped_relay_makes_the_server_unready_and_counts_its_restarts(
    spawn: Spawner, tmp_path: Path
) -> None:
    relay = Relay(tmp_path)
    server = serve(spawn, relay)
    assert httpx.get(server.url + "/readyz").status_code == 200
    for entry in relay.spool.iterdir():
        entry.rmdir()
    relay.spool.rmdir()  # every incarnation now fails: the supervisor gives up
    wait_for(
        lambda: "channels_unhealthy" in event_names(server.process),
        "the relay stopped",
        server.process,
    )
    ready = httpx.get(server.url + "/readyz")
    assert ready.status_code == 503
    assert "source relay stopped after repeated failures" in ready.json()["reasons"]
    metrics = httpx.get(server.url + "/metrics").text
    restarts = [
        line
        for line in metrics.splitlines()
        if line.startswith('taskplane_supervisor_restarts_total{actor="source:relay"}')
    ]
    assert restarts and float(restarts[0].split()[-1]) >= 5


def test_an_auto_detected_relay_that_is_not_configured_is_a_json_log_event(
    spawn: Spawner,
) -> None:
    server = spawn.serve(extra_env={"RELAY_SPOOL_DIR": "/nonexistent"})  # auto-detection
    process = server.process
    assert process.signal_and_wait(signal.SIGINT) == 0
    lines = [line for line in process.stderr().splitlines() if line.strip()]
    for line in lines:
        json.loads(line)  # every line is a JSON log event, none is plain text
    failed = [e for e in process.log_events() if e.get("event") == "source_start_failed"]
    assert [e["source"] for e in failed] == ["relay"]
    assert "RELAY_OUTBOX_DIR" in str(failed[0]["error"])


def test_receipts_record_each_message_handled_then_replied(spawn: Spawner, tmp_path: Path) -> None:
    relay = Relay(tmp_path)
    receipts = tmp_path / "receipts"
    receipts.mkdir()
    relay.drop("001.json", event("m-1", "ask: which colour?"))
    server = spawn.serve(
        store=relay.store,
        token="relay-token-0123",
        principal="op",
        extra_env={**relay.env(), "RELAY_RECEIPTS_DIR": str(receipts)},
    )

    def states() -> list[object]:
        return sorted(json.loads(p.read_text())["state"] for p in receipts.glob("receipt-*.json"))

    wait_for(lambda: states() == ["replied"], "the first receipt replied", server.process)
    (question,) = relay.replies()
    relay.drop("002.json", event("m-2", "blue", replyTo=str(question["messageId"])))
    wait_for(lambda: states() == ["replied", "replied"], "both replied", server.process)
    server.process.signal_and_wait(signal.SIGINT)
    records = {r["messageId"]: r for r in (json.loads(p.read_text()) for p in receipts.iterdir())}
    assert records["m-1"]["taskState"] == "TASK_STATE_INPUT_REQUIRED"
    assert records["m-2"]["taskState"] == "TASK_STATE_COMPLETED"
    assert records["m-1"]["taskId"] == records["m-2"]["taskId"] == question["taskId"]
    assert {r["responseId"] for r in records.values()} == {m["messageId"] for m in relay.replies()}
    handled = store_rows(
        relay.store, "SELECT state FROM deliveries WHERE operation_id LIKE 'handled:%'"
    )
    assert handled == [("delivered",), ("delivered",)]
