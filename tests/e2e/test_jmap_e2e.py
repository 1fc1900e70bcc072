"""The JMAP email source end to end: ``taskplane serve`` against a fake JMAP server on
a loopback port (session object, method calls, push EventSource), with the scripted
agent."""

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
from tests.e2e.fake_jmap import ARCHIVE, PASSWORD, TOKEN, USERNAME, FakeJmap
from tests.e2e.taskplane_proc import Spawner, TaskplaneProcess

pytestmark = pytest.mark.slow


@pytest.fixture
def jmap() -> Iterator[FakeJmap]:
    yield from serving(FakeJmap())


def serve(spawn: Spawner, jmap: FakeJmap, store: Path, **extra: str) -> TaskplaneProcess:
    credentials = {"JMAP_USERNAME": USERNAME, "JMAP_PASSWORD": PASSWORD}
    env = sources_env(
        spawn, store, "jmap", JMAP_SESSION_URL=jmap.session_url, **{**credentials, **extra}
    )
    process = spawn.start(("serve",), env)
    wait_for(lambda: "source_started" in event_names(process), "source_started", process)
    wait_for(
        lambda: len(store_rows(store, "SELECT 1 FROM source_checkpoints")) == 1,
        "the first checkpoint",
        process,
    )
    return process


def not_in_inbox(store: Path) -> int:
    """The checkpoint's count of mail seen outside the inbox (0 before any)."""
    rows = store_rows(store, "SELECT value_json FROM source_checkpoints")
    value = json.loads(str(rows[0][0])) if rows else {}
    return int(value.get("nonWork", {}).get("not-in-inbox", 0))


def test_inbox_mail_is_answered_by_one_submission_and_other_mail_is_not_work(
    spawn: Spawner, jmap: FakeJmap, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    jmap.model.deliver("old news", "already here before the first start")
    process = serve(spawn, jmap, store)
    ids = [jmap.model.deliver(f"question {n}", f"please answer {n}") for n in range(3)]
    jmap.model.deliver("archived", "not for the agent", mailbox=ARCHIVE)
    wait_for(lambda: len(jmap.model.sent()) == 3, "three replies", process)
    wait_for_replies(store, ["delivered"] * 3, "recorded", process)
    wait_for(lambda: not_in_inbox(store) >= 1, "the archived mail counted", process)
    assert process.signal_and_wait(signal.SIGINT) == 0
    sent = jmap.model.sent()
    assert sorted(s["subject"] for s in sent) == [f"Re: question {n}" for n in range(3)]
    assert all(s["to"] == [{"email": "alice@example.org"}] for s in sent)
    assert all(str(s["deliveryId"]).startswith("delivery-") for s in sent)
    assert {s["inReplyTo"][0] for s in sent} == {f"{i}@example.org" for i in ids}
    assert "please answer 0" in next(s["text"] for s in sent if s["subject"] == "Re: question 0")
    assert store_rows(store, "SELECT COUNT(*) FROM tasks") == [(3,)]
    gets = jmap.model.method_calls("Email/get")
    assert gets and all(len(g.get("ids") or ()) <= 2 for g in gets)  # maxObjectsInGet
    assert len(jmap.model.method_calls("Email/changes")) >= 1
    (cp,) = store_rows(store, "SELECT principal, value_json FROM source_checkpoints")
    value = json.loads(str(cp[0 + 1]))
    assert str(cp[0]).startswith("jmap:") and value["nonWork"].get("not-in-inbox", 0) >= 1
    # Our own replies are never work: the tasks are exactly the three questions.


def test_cannot_calculate_changes_resyncs_from_the_inbox(
    spawn: Spawner, jmap: FakeJmap, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, jmap, store)
    assert process.signal_and_wait(signal.SIGINT) == 0
    jmap.model.deliver("while away", "answer me after the restart")
    jmap.model.forget_changes()
    process = serve(spawn, jmap, store, JMAP_USERNAME="", JMAP_PASSWORD="", JMAP_TOKEN=TOKEN)
    wait_for(lambda: len(jmap.model.sent()) == 1, "the reply after the resync", process)
    process.signal_and_wait(signal.SIGINT)
    classes = [
        json.loads(str(r[0]))["classification"]
        for r in store_rows(
            store, "SELECT record_json FROM evidence WHERE record_type = 'source.evidence'"
        )
    ]
    assert classes == ["resync"]
    assert jmap.model.method_calls("Email/query")[0]["filter"] == {"inMailbox": "mb-inbox"}


def test_sigkill_after_acceptance_before_the_checkpoint_makes_no_second_task(
    spawn: Spawner, jmap: FakeJmap, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, jmap, store)
    assert process.signal_and_wait(signal.SIGINT) == 0
    first = jmap.model.deliver("first", "accepted before the kill")
    second = jmap.model.deliver("second", "its read hangs")
    jmap.faults.hold.add(second)  # both are one Email/changes page
    process = serve(spawn, jmap, store)
    wait_for(lambda: len(jmap.model.sent()) == 1, "the first reply", process)
    sigkill(process)  # the first was accepted, the page's checkpoint was never saved
    jmap.faults.released.set()
    process = serve(spawn, jmap, store)
    wait_for(lambda: len(jmap.model.sent()) == 2, "the second reply", process)
    time.sleep(0.5)  # a duplicate Task would need no more than the same sync
    process.signal_and_wait(signal.SIGINT)
    assert store_rows(store, "SELECT COUNT(*) FROM tasks") == [(2,)]
    assert sorted(s["subject"] for s in jmap.model.sent()) == ["Re: first", "Re: second"]
    reads = [g["ids"] for g in jmap.model.method_calls("Email/get") if g.get("fetchTextBodyValues")]
    assert reads.count([first]) == 2 and reads.count([second]) == 2  # read again, one Task


def test_a_dropped_submission_is_looked_up_not_sent_again(
    spawn: Spawner, jmap: FakeJmap, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    jmap.faults.drop_submissions = 1
    process = serve(spawn, jmap, store)
    jmap.model.deliver("lost answer", "the connection drops after sending")
    wait_for_replies(store, ["delivered"], "the lookup", process)
    process.signal_and_wait(signal.SIGINT)
    (sent,) = jmap.model.sent()
    assert replies(store) == [("delivered", sent["emailId"])]
    assert len(jmap.model.method_calls("EmailSubmission/set")) == 1
    header = [
        q["filter"] for q in jmap.model.method_calls("Email/query") if "header" in q["filter"]
    ]
    assert header and header[0]["header"][0] == "X-AI-Outfitter-Delivery-ID"


def test_sigkill_leaving_sending_is_reconciled_by_email_query(
    spawn: Spawner, jmap: FakeJmap, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, jmap, store)
    jmap.model.deliver("crash", "answered, then the record is left sending")
    kill_with_the_reply_sending(process, store)
    process = serve(spawn, jmap, store)
    wait_for_replies(store, ["delivered"], "reconciled", process)
    process.signal_and_wait(signal.SIGINT)
    (sent,) = jmap.model.sent()
    assert replies(store) == [("delivered", sent["emailId"])]


def test_a_refused_submission_reuses_its_draft_and_a_rate_limit_waits(
    spawn: Spawner, jmap: FakeJmap, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    jmap.model.refuse_submissions = 1
    process = serve(spawn, jmap, store)
    jmap.faults.rate_limit_s = 2
    jmap.model.deliver("refused", "sending is paused once")
    wait_for(lambda: len(jmap.model.sent()) == 1, "the reply", process)
    process.signal_and_wait(signal.SIGINT)
    events = event_names(process)
    assert "delivery_failed" in events and "source_rate_limited" in events
    drafts = [c for c in jmap.model.method_calls("Email/set") if c.get("create")]
    assert len(drafts) == 1  # the second submission sent the first draft
    limited_at = jmap.faults.limited_at
    after = [t for t in jmap.faults.api_times if t > limited_at]
    assert limited_at and after[0] - limited_at >= 1.5  # Retry-After: 2 was honoured


def test_a_dropped_event_source_reconnects_and_push_still_drives_intake(
    spawn: Spawner, jmap: FakeJmap, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, jmap, store)
    wait_for(lambda: jmap.faults.streams_opened == 1, "the EventSource", process)
    jmap.drop_streams()
    wait_for(lambda: jmap.faults.streams_opened == 2, "the reconnection", process)
    jmap.model.deliver("after the drop", "pushed over the new stream")
    wait_for(lambda: len(jmap.model.sent()) == 1, "the reply", process, deadline_s=10)
    assert "source_reconnecting" in event_names(process)


def test_bad_credentials_fail_the_explicit_start(
    spawn: Spawner, jmap: FakeJmap, tmp_path: Path
) -> None:
    env = sources_env(
        spawn,
        tmp_path / "store",
        "jmap",
        JMAP_SESSION_URL=jmap.session_url,
        JMAP_USERNAME=USERNAME,
        JMAP_PASSWORD="wrong",
    )
    process = spawn.start(("serve",), env)
    assert process.wait_exit() == 2
    assert "source jmap failed to start" in process.stderr()
