"""The Zulip source end to end: ``taskplane serve`` against a fake Zulip (event
queues, long polls, form-encoded REST) on loopback, with the scripted agent."""

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
from tests.e2e.fake_zulip import ALICE, API_KEY, EMAIL, STREAM_ID, FakeZulip
from tests.e2e.taskplane_proc import Spawner, TaskplaneProcess

pytestmark = pytest.mark.slow


@pytest.fixture
def zulip() -> Iterator[FakeZulip]:
    yield from serving(FakeZulip())


def serve(spawn: Spawner, zulip: FakeZulip, store: Path, **extra: str) -> TaskplaneProcess:
    env = sources_env(
        spawn,
        store,
        "zulip",
        ZULIP_SITE=zulip.url,
        ZULIP_EMAIL=EMAIL,
        ZULIP_API_KEY=API_KEY,
        **extra,
    )
    polls = len(zulip.polls)
    process = spawn.start(("serve",), env)
    wait_for(lambda: len(zulip.polls) > polls, "the first poll", process)
    return process


def checkpoint(store: Path) -> dict[str, object]:
    (row,) = store_rows(store, "SELECT value_json FROM source_checkpoints")
    value: dict[str, object] = json.loads(str(row[0]))
    return value


def test_a_mention_and_a_direct_message_are_answered_where_they_came_from(
    spawn: Spawner, zulip: FakeZulip, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, zulip, store)
    stream_message = zulip.say("summarise the deploy", topic="deploys")
    zulip.say("chatter without a mention", mention=False)
    direct_message = zulip.direct("and a private question")
    wait_for(lambda: len(zulip.bot_messages()) == 2, "two replies", process)
    wait_for(lambda: len(zulip.reactions) == 2, "two receipts", process)
    wait_for(
        lambda: checkpoint(store).get("nonWork") == {"not-a-mention": 1, "own-message": 2},
        "counted",
        process,
    )
    wait_for_replies(store, ["delivered"] * 2, "recorded", process)
    assert process.signal_and_wait(signal.SIGINT) == 0
    to_stream, to_alice = sorted(zulip.bot_messages(), key=lambda m: m["type"] != "stream")
    assert (to_stream["to"], to_stream["topic"]) == (STREAM_ID, "deploys")
    assert "summarise the deploy" in to_stream["content"]
    assert to_alice["type"] == "direct" and to_alice["to"] == [ALICE["id"]]
    assert {r[1] for r in zulip.reactions} == {stream_message, direct_message}
    assert store_rows(store, "SELECT COUNT(*) FROM tasks") == [(2,)]
    value = checkpoint(store)
    assert value["queueId"] and int(str(value["lastEventId"])) >= 4
    assert [r[0] for r in replies(store)] == ["delivered", "delivered"]


def test_a_restart_resumes_the_stored_queue_and_an_expired_one_is_replaced(
    spawn: Spawner, zulip: FakeZulip, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, zulip, store)
    assert process.signal_and_wait(signal.SIGINT) == 0
    zulip.say("sent while taskplane was down")
    process = serve(spawn, zulip, store)
    wait_for(lambda: len(zulip.bot_messages()) == 1, "the reply from the resumed queue", process)
    assert zulip.registered == 1
    zulip.expire_queues()
    wait_for(lambda: zulip.registered == 2, "the replacement queue", process)
    zulip.say("after the replacement")
    wait_for(lambda: len(zulip.bot_messages()) == 2, "the second reply", process)
    assert "source_queue_replaced" in event_names(process)


def test_sigkill_after_acceptance_before_the_checkpoint_makes_no_second_task(
    spawn: Spawner, zulip: FakeZulip, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    zulip.fail_reactions = True  # accepted, but the event is held before the checkpoint
    process = serve(spawn, zulip, store)
    zulip.say("accepted, then killed")
    wait_for(lambda: zulip.reaction_calls >= 2, "the held event retried", process)
    wait_for(lambda: len(zulip.bot_messages()) == 1, "the reply", process)
    # Killed mid-send, the reply would rightly fail closed (``ambiguous``): kill only
    # once it is recorded, so the kill lands where the test says.
    wait_for_replies(store, ["delivered"], "recorded", process)
    sigkill(process)
    zulip.fail_reactions = False
    process = serve(spawn, zulip, store)
    wait_for(lambda: len(zulip.reactions) == 1, "the receipt after the restart", process)
    time.sleep(0.5)
    process.signal_and_wait(signal.SIGINT)
    assert store_rows(store, "SELECT COUNT(*) FROM tasks") == [(1,)]
    assert len(zulip.bot_messages()) == 1
    assert zulip.registered == 1  # the same queue, from the held cursor


def test_an_unknown_outcome_of_a_reply_fails_closed_as_ambiguous(
    spawn: Spawner, zulip: FakeZulip, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    zulip.fail_after_send = 1
    process = serve(spawn, zulip, store)
    zulip.say("this answer's fate is unknown")
    wait_for_replies(store, ["ambiguous"], "ambiguous", process)
    time.sleep(1.5)
    process.signal_and_wait(signal.SIGINT)
    assert len(zulip.bot_messages()) == 1
    assert "channels_unhealthy" in event_names(process)


def test_sigkill_leaving_a_reply_sending_fails_closed_after_the_restart(
    spawn: Spawner, zulip: FakeZulip, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, zulip, store)
    zulip.say("answered, then left sending")
    kill_with_the_reply_sending(process, store)
    process = serve(spawn, zulip, store)
    wait_for_replies(store, ["ambiguous"], "failed closed", process)
    process.signal_and_wait(signal.SIGINT)
    assert len(zulip.bot_messages()) == 1


def test_refusals_rate_limits_and_failing_polls_are_retried(
    spawn: Spawner, zulip: FakeZulip, tmp_path: Path
) -> None:
    zulip.refuse_sends = 1
    zulip.fail_polls = 2
    process = serve(spawn, zulip, tmp_path / "store")
    zulip.say("refused once")
    wait_for(lambda: len(zulip.bot_messages()) == 1, "the first reply", process)
    zulip.rate_limit_sends_s = 2
    zulip.say("rate limited once")
    wait_for(lambda: len(zulip.bot_messages()) == 2, "the second reply", process)
    limited, after = zulip.send_times[-2:]
    assert after - limited >= 1.5  # Retry-After: 2 was honoured
    events = event_names(process)
    assert "delivery_failed" in events and "source_poll_failed" in events


def test_a_bad_api_key_fails_the_explicit_start(
    spawn: Spawner, zulip: FakeZulip, tmp_path: Path
) -> None:
    env = sources_env(
        spawn,
        tmp_path / "store",
        "zulip",
        ZULIP_SITE=zulip.url,
        ZULIP_EMAIL=EMAIL,
        ZULIP_API_KEY="x",
    )
    process = spawn.start(("serve",), env)
    assert process.wait_exit() == 2
    assert "source zulip failed to start" in process.stderr()


def test_messages_sent_while_no_queue_existed_are_caught_up_once_each(
    spawn: Spawner, zulip: FakeZulip, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, zulip, store)
    zulip.say("before the outage")
    wait_for(lambda: len(zulip.bot_messages()) == 1, "the first reply", process)
    zulip.set_outage(True)
    wait_for(lambda: zulip.refused_in_outage > 0, "the source held by the outage", process)
    zulip.expire_queues()  # Zulip drops the queue nobody could poll
    missed = [
        zulip.say("missed mention", topic="deploys"),
        zulip.direct("missed direct message"),
        zulip.say("missed in another topic", topic="incidents"),
    ]
    zulip.say("missed chatter", mention=False)
    refused = zulip.refused_in_outage
    wait_for(lambda: zulip.refused_in_outage > refused, "a retry during the outage", process)
    zulip.set_outage(False)
    wait_for(lambda: len(zulip.bot_messages()) == 4, "the caught-up replies", process)
    after = zulip.say("on the replacement queue")
    wait_for(lambda: len(zulip.bot_messages()) == 5, "the reply from the new queue", process)
    wait_for(lambda: len(zulip.reactions) == 5, "five receipts", process)
    wait_for_replies(store, ["delivered"] * 5, "recorded", process)
    wait_for(
        lambda: int(str(checkpoint(store).get("lastMessageId"))) >= after,
        "the checkpoint past the last message",
        process,
    )
    assert process.signal_and_wait(signal.SIGINT) == 0
    assert zulip.registered == 2
    assert store_rows(store, "SELECT COUNT(*) FROM tasks") == [(5,)]
    assert {r[1] for r in zulip.reactions} >= {*missed, after}
    (read, *_) = zulip.reads
    assert (read["include_anchor"], read["num_before"], read["narrow"]) == ("false", "0", "[]")
    value = checkpoint(store)
    assert "catchUpTo" not in value
    non_work = value["nonWork"]
    assert isinstance(non_work, dict) and non_work["not-a-mention"] == 1
    events = event_names(process)
    assert "source_queue_replaced" in events and "source_caught_up" in events


def test_a_start_after_the_queue_expired_catches_up_before_polling(
    spawn: Spawner, zulip: FakeZulip, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, zulip, store)
    assert process.signal_and_wait(signal.SIGINT) == 0
    zulip.expire_queues()  # stopped longer than Zulip keeps an idle queue
    missed = zulip.say("sent while stopped and queueless")
    process = serve(spawn, zulip, store)
    wait_for(lambda: len(zulip.bot_messages()) == 1, "the caught-up reply", process)
    wait_for_replies(store, ["delivered"], "recorded", process)
    assert process.signal_and_wait(signal.SIGINT) == 0
    assert zulip.registered == 2 and [r[1] for r in zulip.reactions] == [missed]
    assert store_rows(store, "SELECT COUNT(*) FROM tasks") == [(1,)]
