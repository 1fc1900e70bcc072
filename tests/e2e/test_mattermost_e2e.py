"""The Mattermost source end to end: ``taskplane serve`` against a fake Mattermost
(REST v4 and real WebSocket frames on one loopback port), with the scripted agent."""

from __future__ import annotations

import json
import signal
import time
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
from tests.e2e.fake_mattermost import CHANNEL, DM, TOKEN, FakeMattermost
from tests.e2e.taskplane_proc import Spawner, TaskplaneProcess

pytestmark = pytest.mark.slow

AGENTS = Path(__file__).resolve().parent / "agents"


@pytest.fixture
def mattermost() -> Iterator[FakeMattermost]:
    yield from serving(FakeMattermost())


def serve(spawn: Spawner, fake: FakeMattermost, store: Path, **extra: str) -> TaskplaneProcess:
    env = sources_env(
        spawn, store, "mattermost", MATTERMOST_URL=fake.url, MATTERMOST_TOKEN=TOKEN, **extra
    )
    before = fake.authenticated
    process = spawn.start(("serve",), env)
    wait_for(lambda: fake.authenticated > before, "the authenticated socket", process)
    wait_for(lambda: "channels_ready" in event_names(process), "channels_ready", process)
    return process


def receipts(store: Path) -> list[tuple[object, ...]]:
    return store_rows(store, "SELECT state FROM deliveries WHERE operation_id LIKE 'handled:%'")


def own_posts_counted(store: Path) -> int:
    """The checkpoint's count of our own posts seen in :data:`CHANNEL` (0 before any)."""
    rows = store_rows(store, "SELECT value_json FROM source_checkpoints")
    value = json.loads(str(rows[0][0])) if rows else {}
    return int(value.get("nonWork", {}).get(f"{CHANNEL}/own-post", 0))


def test_a_mention_is_answered_at_its_root_with_one_receipt_and_the_rest_is_not_work(
    spawn: Spawner, mattermost: FakeMattermost, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, mattermost, store)
    root = mattermost.say("top level question")
    threaded = mattermost.say("and in the thread", root_id=root)
    mattermost.say("chatter, no mention", mention=False)
    direct = mattermost.say(
        "a direct message", channel="dm0channel", channel_type="D", mention=False
    )
    wait_for(lambda: len(mattermost.bot_posts()) == 3, "three replies", process)
    wait_for(lambda: len(mattermost.reactions) == 3, "three receipts", process)
    # The store records a receipt after Mattermost answered it, and the echoes of our
    # replies are taken after the replies: both happen after what the fake sees.
    wait_for(lambda: receipts(store) == [("delivered",)] * 3, "the receipts recorded", process)
    wait_for(lambda: own_posts_counted(store) >= 2, "the echoes of our replies", process)
    assert process.signal_and_wait(signal.SIGINT) == 0
    posts = mattermost.bot_posts()
    assert sorted(p["root_id"] for p in posts) == sorted([root, root, direct])
    assert all(str(p["props"]["taskplane_delivery_id"]).startswith("delivery-") for p in posts)
    assert "top level question" in next(p["message"] for p in posts if p["channel_id"] == CHANNEL)
    assert {r["post_id"] for r in mattermost.reactions} == {root, threaded, direct}
    assert {r["emoji_name"] for r in mattermost.reactions} == {"white_check_mark"}
    assert store_rows(store, "SELECT COUNT(*) FROM tasks") == [(3,)]
    contexts = store_rows(store, "SELECT COUNT(DISTINCT context_id) FROM tasks")
    assert contexts == [(2,)]  # the thread reply continues the root's conversation
    (cp,) = store_rows(store, "SELECT principal, value_json FROM source_checkpoints")
    value = json.loads(str(cp[1]))
    assert str(cp[0]).startswith("mattermost:") and value["lastPostId"] in {root, threaded, direct}
    assert value["nonWork"][f"{CHANNEL}/not-a-mention"] == 1
    assert value["nonWork"][f"{CHANNEL}/own-post"] >= 2  # our replies come back as events
    assert receipts(store) == [("delivered",)] * 3


def test_an_unknown_outcome_of_a_reply_fails_closed_as_ambiguous(
    spawn: Spawner, mattermost: FakeMattermost, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    mattermost.fail_after_post = 1
    process = serve(spawn, mattermost, store)
    mattermost.say("this answer's fate is unknown")
    wait_for_replies(store, ["ambiguous"], "ambiguous", process)
    time.sleep(1.5)  # a blind resend would need one more delivery round
    process.signal_and_wait(signal.SIGINT)
    assert len(mattermost.bot_posts()) == 1
    events = event_names(process)
    assert "delivery_ambiguous" in events and "channels_unhealthy" in events


def test_sigkill_leaving_a_reply_sending_fails_closed_after_the_restart(
    spawn: Spawner, mattermost: FakeMattermost, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, mattermost, store)
    mattermost.say("answered, then the record is left sending")
    kill_with_the_reply_sending(process, store)
    process = serve(spawn, mattermost, store)
    wait_for_replies(store, ["ambiguous"], "failed closed", process)
    process.signal_and_wait(signal.SIGINT)
    assert len(mattermost.bot_posts()) == 1


def test_sigkill_after_acceptance_before_the_reply_delivers_it_after_the_restart(
    spawn: Spawner, mattermost: FakeMattermost, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    # The first run's agent never finishes its turn, so no reply exists to be in flight
    # at the kill (a reply left sending would rightly fail closed, the test above).
    held = {"A2A_AGENT_RUNTIME": "python", "A2A_AGENT_CALLABLE": "held_agent:hold"}
    process = serve(spawn, mattermost, store, PYTHONPATH=str(AGENTS), **held)
    mattermost.say("accepted, then killed")
    wait_for(lambda: len(mattermost.reactions) == 1, "the receipt", process)
    wait_for(lambda: receipts(store) == [("delivered",)], "the receipt recorded", process)
    wait_for(
        lambda: store_rows(store, "SELECT state FROM tasks") == [("TASK_STATE_WORKING",)],
        "the held turn",
        process,
    )
    assert replies(store) == []
    sigkill(process)
    process = serve(spawn, mattermost, store)  # the scripted agent replays the turn
    wait_for(lambda: len(mattermost.bot_posts()) == 1, "the reply after the restart", process)
    process.signal_and_wait(signal.SIGINT)
    assert store_rows(store, "SELECT COUNT(*) FROM tasks") == [(1,)]


def test_refused_and_rate_limited_replies_are_retried_and_posted_once(
    spawn: Spawner, mattermost: FakeMattermost, tmp_path: Path
) -> None:
    mattermost.refuse_posts = 1
    process = serve(spawn, mattermost, tmp_path / "store")
    mattermost.say("refused once")
    wait_for(lambda: len(mattermost.bot_posts()) == 1, "the first reply", process)
    mattermost.rate_limit_posts_s = 2
    mattermost.say("rate limited once")
    wait_for(lambda: len(mattermost.bot_posts()) == 2, "the second reply", process)
    limited, after = mattermost.post_requests[-2:]
    assert after - limited >= 1.5  # X-Ratelimit-Reset: 2 was honoured
    assert "delivery_failed" in event_names(process)


def test_a_failed_receipt_retries_the_retained_event_without_reconnecting(
    spawn: Spawner, mattermost: FakeMattermost, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    mattermost.fail_reactions = 2
    process = serve(spawn, mattermost, store)
    mattermost.say("the receipt fails twice")
    wait_for(lambda: len(mattermost.reactions) == 1, "the receipt", process)
    wait_for(lambda: len(mattermost.bot_posts()) == 1, "the reply", process)
    process.signal_and_wait(signal.SIGINT)
    assert mattermost.connections == 1
    assert event_names(process).count("source_event_retry") == 2
    assert store_rows(store, "SELECT COUNT(*) FROM tasks") == [(1,)]


def test_a_dropped_socket_reconnects_and_takes_new_posts(
    spawn: Spawner, mattermost: FakeMattermost, tmp_path: Path
) -> None:
    process = serve(spawn, mattermost, tmp_path / "store")
    mattermost.drop()
    wait_for(lambda: mattermost.authenticated == 2, "the reconnection", process)
    mattermost.say("after the drop")
    wait_for(lambda: len(mattermost.bot_posts()) == 1, "the reply", process)
    assert "source_reconnecting" in event_names(process)


def tasks(store: Path) -> int:
    (count,) = store_rows(store, "SELECT COUNT(*) FROM tasks")
    return int(str(count[0]))


def test_posts_made_while_the_socket_was_down_are_caught_up_each_once(
    spawn: Spawner, mattermost: FakeMattermost, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, mattermost, store)
    before = mattermost.say("before the drop")
    wait_for(lambda: len(mattermost.bot_posts()) == 1, "the first reply", process)
    wait_for(lambda: own_posts_counted(store) == 1, "the echo of the reply", process)
    echo = mattermost.bot_posts()[0]["id"]  # the newest post of the channel taken
    mattermost.hold_sockets = True
    mattermost.drop()
    wait_for(lambda: "source_reconnecting" in event_names(process), "the drop seen", process)
    missed = [
        mattermost.say("while the socket was down"),
        mattermost.say("a thread reply while down", root_id=before),
        mattermost.say("a direct message while down", channel=DM, channel_type="D", mention=False),
    ]
    mattermost.say("chatter while down, no mention", mention=False)
    mattermost.hold_sockets = False
    wait_for(lambda: mattermost.authenticated == 2, "the reconnection", process)
    after = mattermost.say("after the reconnection")
    wait_for(lambda: len(mattermost.bot_posts()) == 5, "five replies", process)
    wait_for(lambda: len(mattermost.reactions) == 5, "five receipts", process)
    wait_for(lambda: receipts(store) == [("delivered",)] * 5, "the receipts recorded", process)
    assert process.signal_and_wait(signal.SIGINT) == 0
    assert tasks(store) == 5
    assert sorted(r["post_id"] for r in mattermost.reactions) == sorted([before, *missed, after])
    assert "source_caught_up" in event_names(process)
    (cp,) = store_rows(store, "SELECT value_json FROM source_checkpoints")
    value = json.loads(str(cp[0]))
    assert value["nonWork"][f"{CHANNEL}/not-a-mention"] == 1  # counted once, not per read
    in_dm = {p["id"] for p in mattermost.posts if p["channel_id"] == DM}
    assert value["channels"][DM]["postId"] in in_dm  # the DM or our reply's echo
    listed = [r for r in mattermost.list_requests if r["channel_id"] == CHANNEL]
    assert listed[0] == {"channel_id": CHANNEL, "after": echo, "page": "0", "per_page": "200"}


def test_posts_made_while_taskplane_was_killed_are_caught_up_after_the_restart(
    spawn: Spawner, mattermost: FakeMattermost, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, mattermost, store)
    first = mattermost.say("before the kill")
    wait_for(lambda: len(mattermost.bot_posts()) == 1, "the first reply", process)
    wait_for(lambda: receipts(store) == [("delivered",)], "the receipt recorded", process)
    sigkill(process)
    missed = [mattermost.say("while killed"), mattermost.say("also while killed")]
    mattermost.purge(first)  # the checkpoint's post is gone: caught up by its time
    mattermost.purge(mattermost.bot_posts()[0]["id"])
    process = serve(spawn, mattermost, store)
    wait_for(lambda: len(mattermost.bot_posts()) == 2, "the replies after the restart", process)
    wait_for(lambda: len(mattermost.reactions) == 3, "the receipts", process)
    process.signal_and_wait(signal.SIGINT)
    assert tasks(store) == 3
    assert {r["post_id"] for r in mattermost.reactions} == {first, *missed}
    assert any("since" in r for r in mattermost.list_requests)


def test_a_bad_token_fails_the_explicit_start(
    spawn: Spawner, mattermost: FakeMattermost, tmp_path: Path
) -> None:
    env = sources_env(
        spawn, tmp_path / "store", "mattermost", MATTERMOST_URL=mattermost.url, MATTERMOST_TOKEN="x"
    )
    process = spawn.start(("serve",), env)
    assert process.wait_exit() == 2
    assert "source mattermost failed to start" in process.stderr()
