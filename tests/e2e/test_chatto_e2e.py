"""The Chatto source end to end: ``taskplane serve`` against a fake Chatto (ConnectRPC
JSON and binary protobuf realtime frames on one loopback port), with the scripted
agent."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e._support import (
    event_names,
    kill_with_the_reply_sending,
    logged,
    serving,
    sigkill,
    sources_env,
    store_rows,
    wait_for,
    wait_for_replies,
)
from tests.e2e.fake_chatto import ALICE, TOKEN, FakeChatto
from tests.e2e.taskplane_proc import Spawner, TaskplaneProcess

pytestmark = pytest.mark.slow

DM_ROOM = {"id": "room0dm0alice", "kind": "ROOM_KIND_DM", "name": ""}


@pytest.fixture
def chatto() -> Iterator[FakeChatto]:
    yield from serving(FakeChatto())


def serve(spawn: Spawner, fake: FakeChatto, store: Path, **extra: str) -> TaskplaneProcess:
    env = sources_env(spawn, store, "chatto", CHATTO_URL=fake.url, CHATTO_TOKEN=TOKEN, **extra)
    before = len(fake.subscriptions)
    process = spawn.start(("serve",), env)
    wait_for(lambda: len(fake.subscriptions) > before, "the subscription", process)
    wait_for(lambda: "channels_ready" in event_names(process), "channels_ready", process)
    return process


def checkpoint(store: Path) -> dict[str, Any]:
    rows = store_rows(store, "SELECT value_json FROM source_checkpoints")
    value: dict[str, Any] = json.loads(str(rows[0][0])) if rows else {}
    return value


def dismissals(store: Path) -> list[tuple[object, ...]]:
    return store_rows(store, "SELECT state FROM deliveries WHERE operation_id LIKE 'dismiss:%'")


def evidence(store: Path) -> list[str]:
    rows = store_rows(
        store, "SELECT record_json FROM evidence WHERE record_type = 'source.evidence'"
    )
    return [json.loads(str(r[0]))["classification"] for r in rows]


def test_mentions_and_a_direct_message_are_answered_in_place_and_dismissed(
    spawn: Spawner, chatto: FakeChatto, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, chatto, store)
    root, _ = chatto.notify("@taskplane_bot top level question")
    threaded, _ = chatto.notify("@taskplane_bot and in the thread", thread_root=root)
    direct, _ = chatto.notify("a direct message", kind="directMessageReceived", room=DM_ROOM)
    _, ambient = chatto.notify("someone posted in a followed room", kind="followedRoomActivity")
    wait_for(lambda: len(chatto.bot_messages()) == 3, "three replies", process)
    wait_for(lambda: chatto.visible() == [ambient], "the three dismissed", process)
    wait_for(lambda: dismissals(store) == [("delivered",)] * 3, "dismissals recorded", process)
    # The dismissals come back as projection events; the last one's cursor is stored.
    last = f"cur{chatto.cursor}"
    wait_for(lambda: checkpoint(store).get("cursor") == last, "the last cursor", process)
    assert process.signal_and_wait(signal.SIGINT) == 0
    replies = {m["inReplyTo"]: m for m in chatto.bot_messages()}
    assert set(replies) == {root, threaded, direct}
    assert replies[root]["threadRootEventId"] == ""  # a top-level message: a plain reply
    assert replies[threaded]["threadRootEventId"] == root  # in the exact thread
    assert replies[direct]["roomId"] == DM_ROOM["id"]
    assert "top level question" in replies[root]["body"]
    assert store_rows(store, "SELECT COUNT(*) FROM tasks") == [(3,)]
    contexts = store_rows(store, "SELECT COUNT(DISTINCT context_id) FROM tasks")
    assert contexts == [(2,)]  # the thread reply continues its root's conversation
    (principal,) = store_rows(store, "SELECT principal FROM source_checkpoints")
    assert str(principal[0]).startswith("chatto:")
    value = checkpoint(store)
    assert value["cursor"] == last == f"cur{chatto.cursor}"
    assert value["nonWork"] == {"followedRoomActivity": 1}
    assert chatto.subscriptions == [None]
    assert TOKEN not in process.stderr() + process.stdout()  # the bot's key is never logged


def test_notifications_beyond_the_replacement_page_are_swept_oldest_first(
    spawn: Spawner, chatto: FakeChatto, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    chatto.page_size = 1  # the projection lists only the newest; the listing has all
    first, _ = chatto.notify("@taskplane_bot made while taskplane was down")
    second, _ = chatto.notify("@taskplane_bot also made while it was down")
    process = serve(spawn, chatto, store)
    wait_for(lambda: len(chatto.bot_messages()) == 2, "both replies", process)
    wait_for(lambda: chatto.visible() == [], "both dismissed", process)
    process.signal_and_wait(signal.SIGINT)
    assert chatto.called("NotificationService/ListNotificationOccurrences") == 1
    # the newest came with the projection; the sweep took the older one
    assert [m["inReplyTo"] for m in chatto.bot_messages()] == [second, first]
    assert store_rows(store, "SELECT COUNT(*) FROM tasks") == [(2,)]


def test_an_unknown_outcome_of_a_reply_fails_closed_as_ambiguous(
    spawn: Spawner, chatto: FakeChatto, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    chatto.fail_after_create = 1
    process = serve(spawn, chatto, store)
    chatto.notify("@taskplane_bot this answer's fate is unknown")
    wait_for_replies(store, ["ambiguous"], "ambiguous", process)
    time.sleep(1.5)  # a blind resend would need one more delivery round
    process.signal_and_wait(signal.SIGINT)
    assert len(chatto.bot_messages()) == 1
    events = event_names(process)
    assert "delivery_ambiguous" in events and "channels_unhealthy" in events


def test_sigkill_leaving_a_reply_sending_fails_closed_after_the_restart(
    spawn: Spawner, chatto: FakeChatto, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, chatto, store)
    chatto.notify("@taskplane_bot answered, then the record is left sending")
    kill_with_the_reply_sending(process, store)
    process = serve(spawn, chatto, store)
    wait_for_replies(store, ["ambiguous"], "failed closed", process)
    process.signal_and_wait(signal.SIGINT)
    assert len(chatto.bot_messages()) == 1


def test_sigkill_after_acceptance_before_the_dismissal_and_cursor_makes_no_second_task(
    spawn: Spawner, chatto: FakeChatto, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, chatto, store)
    wait_for(lambda: "cursor" in checkpoint(store), "the caught-up cursor", process)
    before = checkpoint(store)["cursor"]
    chatto.fail_deletes = True  # accepted, but the dismissal (and so the cursor) is held
    chatto.notify("@taskplane_bot accepted, then killed")
    wait_for(lambda: len(chatto.bot_messages()) == 1, "the reply", process)
    wait_for(
        lambda: chatto.called("NotificationService/DeleteNotificationOccurrence") >= 2,
        "the dismissal retried",
        process,
    )
    assert checkpoint(store)["cursor"] == before
    sigkill(process)
    chatto.fail_deletes = False
    process = serve(spawn, chatto, store)
    wait_for(lambda: chatto.visible() == [], "the dismissal after the restart", process)
    wait_for(lambda: checkpoint(store)["cursor"] == f"cur{chatto.cursor}", "the cursor", process)
    process.signal_and_wait(signal.SIGINT)
    assert chatto.subscriptions == [None, before]  # resumed from the stored cursor
    assert store_rows(store, "SELECT COUNT(*) FROM tasks") == [(1,)]
    assert len(chatto.bot_messages()) == 1


def test_a_replay_with_a_changed_message_is_evidence_and_the_cursor_advances(
    spawn: Spawner, chatto: FakeChatto, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, chatto, store)
    chatto.fail_deletes = True
    message, _ = chatto.notify("@taskplane_bot the first text")
    wait_for(lambda: len(chatto.bot_messages()) == 1, "the reply", process)
    sigkill(process)
    chatto.edit(message, "@taskplane_bot an edited text")
    chatto.fail_deletes = False
    process = serve(spawn, chatto, store)
    wait_for(lambda: evidence(store) == ["refused"], "the evidence", process)
    wait_for(lambda: chatto.visible() == [], "the refused notification dismissed", process)
    wait_for(lambda: checkpoint(store)["cursor"] == f"cur{chatto.cursor}", "the cursor", process)
    process.signal_and_wait(signal.SIGINT)
    assert store_rows(store, "SELECT COUNT(*) FROM tasks") == [(1,)]
    assert len(chatto.bot_messages()) == 1


def test_a_notification_dismissed_elsewhere_is_evidence_not_work(
    spawn: Spawner, chatto: FakeChatto, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, chatto, store)
    chatto.vanish_next = True
    chatto.notify("@taskplane_bot dismissed on another device first")
    chatto.notify("@taskplane_bot still here")
    wait_for(lambda: len(chatto.bot_messages()) == 1, "the one reply", process)
    wait_for(lambda: evidence(store) == ["dismissed-elsewhere"], "the evidence", process)
    process.signal_and_wait(signal.SIGINT)
    assert store_rows(store, "SELECT COUNT(*) FROM tasks") == [(1,)]
    assert "still here" in chatto.bot_messages()[0]["body"]


def test_refused_and_rate_limited_replies_are_retried_and_posted_once(
    spawn: Spawner, chatto: FakeChatto, tmp_path: Path
) -> None:
    chatto.refuse_creates = 1
    process = serve(spawn, chatto, tmp_path / "store")
    chatto.notify("@taskplane_bot refused once")
    wait_for(lambda: len(chatto.bot_messages()) == 1, "the first reply", process)
    chatto.rate_limit_creates_s = 2
    chatto.notify("@taskplane_bot rate limited once")
    wait_for(lambda: len(chatto.bot_messages()) == 2, "the second reply", process)
    limited, after = chatto.create_requests[-2:]
    assert after - limited >= 1.5  # Retry-After: 2 was honoured
    assert "delivery_failed" in event_names(process)


def test_a_dropped_socket_resumes_from_the_cursor_after_the_delay_asked_for(
    spawn: Spawner, chatto: FakeChatto, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, chatto, store)
    wait_for(lambda: "cursor" in checkpoint(store), "the caught-up cursor", process)
    cursor = checkpoint(store)["cursor"]
    dropped = time.monotonic()
    chatto.drop({"code": "server_restarting", "reconnect": True, "retryAfterMs": 1500})
    wait_for(lambda: len(chatto.subscriptions) == 2, "the reconnection", process)
    assert time.monotonic() - dropped >= 1.2  # the close frame's retry_after_ms
    assert chatto.subscriptions[-1] == cursor
    chatto.drop()  # and a bare drop: backoff
    wait_for(lambda: len(chatto.subscriptions) == 3, "the second reconnection", process)
    chatto.notify("@taskplane_bot after the drops", actor=ALICE)
    wait_for(lambda: len(chatto.bot_messages()) == 1, "the reply", process)
    assert logged(process, "source_reconnecting", at_least=2).count("source_reconnecting") == 2


def test_a_silent_connection_is_opened_again_after_three_missed_heartbeats(
    spawn: Spawner, chatto: FakeChatto, tmp_path: Path
) -> None:
    chatto.heartbeat_s = 1
    process = serve(spawn, chatto, tmp_path / "store")
    chatto.silent = True  # the socket stays open, but nothing more arrives on it
    silent = time.monotonic()
    wait_for(lambda: len(chatto.subscriptions) == 2, "the reconnection", process)
    assert time.monotonic() - silent >= 2.0  # three intervals of 1 s without a frame
    chatto.silent = False
    chatto.notify("@taskplane_bot after the silence")
    wait_for(lambda: len(chatto.bot_messages()) == 1, "the reply", process)
    assert "source_reconnecting" in logged(process, "source_reconnecting")


def test_a_refused_resume_cursor_is_dropped_for_a_fresh_subscription(
    spawn: Spawner, chatto: FakeChatto, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, chatto, store)
    wait_for(lambda: "cursor" in checkpoint(store), "the caught-up cursor", process)
    cursor = checkpoint(store)["cursor"]
    process.signal_and_wait(signal.SIGINT)
    chatto.refuse_cursors = True
    chatto.notify("@taskplane_bot made while the cursor went stale")
    process = serve(spawn, chatto, store)
    wait_for(lambda: len(chatto.bot_messages()) == 1, "the reply", process)
    process.signal_and_wait(signal.SIGINT)
    assert chatto.subscriptions == [None, cursor, None]
    assert store_rows(store, "SELECT COUNT(*) FROM tasks") == [(1,)]


def test_a_bad_token_fails_the_explicit_start(
    spawn: Spawner, chatto: FakeChatto, tmp_path: Path
) -> None:
    env = sources_env(spawn, tmp_path / "store", "chatto", CHATTO_URL=chatto.url, CHATTO_TOKEN="x")
    process = spawn.start(("serve",), env)
    assert process.wait_exit() == 2
    assert "source chatto failed to start" in process.stderr()
