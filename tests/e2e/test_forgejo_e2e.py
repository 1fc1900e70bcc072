"""The Forgejo notifications source end to end: ``taskplane serve`` against a fake
Forgejo API on a loopback port, with the scripted agent."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from datetime import UTC, timedelta
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
from tests.e2e.fake_forgejo import TOKEN, FakeForgejo
from tests.e2e.taskplane_proc import Spawner, TaskplaneProcess

pytestmark = pytest.mark.slow

REPO = "acme/widgets"


@pytest.fixture
def forgejo() -> Iterator[FakeForgejo]:
    yield from serving(FakeForgejo())


def serve(spawn: Spawner, forgejo: FakeForgejo, store: Path, **extra: str) -> TaskplaneProcess:
    variables = {"FORGEJO_POLL_INTERVAL_S": "1", "FORGEJO_NOTIFY_MARK_READ": "1", **extra}
    env = sources_env(
        spawn, store, "forgejo", FORGEJO_URL=forgejo.url, FORGEJO_TOKEN=TOKEN, **variables
    )
    process = spawn.start(("serve",), env)
    wait_for(lambda: "source_started" in event_names(process), "source_started", process)
    return process


def marked_read(store: Path, thread: int) -> list[tuple[object, ...]]:
    return store_rows(
        store, f"SELECT state FROM deliveries WHERE operation_id = 'mark-read:{thread}'"
    )


def evidence(store: Path) -> list[str]:
    rows = store_rows(
        store, "SELECT record_json FROM evidence WHERE record_type = 'source.evidence'"
    )
    return sorted(json.loads(str(r[0]))["classification"] for r in rows)


def test_an_issue_notification_is_answered_on_the_exact_issue_and_marked_read(
    spawn: Spawner, forgejo: FakeForgejo, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    forgejo.notify(1, REPO, "Issue", 7, comment="please triage")
    forgejo.notify(2, REPO, "Repository", 0)
    process = serve(spawn, forgejo, store)
    wait_for(lambda: len(forgejo.comments_on(REPO, 7)) == 1, "the comment", process)
    wait_for(lambda: 1 not in forgejo.unread(), "mark-read", process)
    wait_for(lambda: evidence(store) == ["non-work"], "the evidence", process)
    wait_for(lambda: len(forgejo.sinces) >= 2, "a second poll", process)
    # The store records a delivery after the forge answered it.
    wait_for_replies(store, ["delivered"], "recorded", process)
    wait_for(lambda: marked_read(store, 1) == [("delivered",)], "mark-read recorded", process)
    assert process.signal_and_wait(signal.SIGINT) == 0
    (comment,) = forgejo.comments_on(REPO, 7)
    assert "please triage" in comment["body"]
    assert "<!-- taskplane-delivery: delivery-" in comment["body"]
    assert replies(store) == [("delivered", str(comment["id"]))]
    ops = dict(store_rows(store, "SELECT operation_id, state FROM deliveries"))
    assert ops["mark-read:1"] == "delivered"
    (cp,) = store_rows(store, "SELECT principal, value_json FROM source_checkpoints")
    value = json.loads(str(cp[1]))
    assert str(cp[0]).startswith("forgejo:") and value["since"].endswith("Z")
    newest = forgejo.clock.astimezone(UTC) - timedelta(seconds=60)  # the forge's clock
    assert forgejo.sinces[0] is None
    assert forgejo.sinces[1] == newest.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_without_mark_read_a_revision_is_taken_once_and_a_new_one_continues_the_context(
    spawn: Spawner, forgejo: FakeForgejo, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    forgejo.notify(3, REPO, "Pull", 9)
    process = serve(spawn, forgejo, store, FORGEJO_NOTIFY_MARK_READ="0")
    wait_for(lambda: len(forgejo.comments_on(REPO, 9)) == 1, "the first comment", process)
    wait_for(lambda: len(forgejo.calls("GET", "/api/v1/notifications")) >= 3, "polls", process)
    assert len(forgejo.comments_on(REPO, 9)) == 1 and forgejo.unread() == [3]
    forgejo.notify(3, REPO, "Pull", 9, comment="one more thing")
    wait_for(lambda: len(forgejo.comments_on(REPO, 9)) == 2, "the second comment", process)
    process.signal_and_wait(signal.SIGINT)
    assert store_rows(store, "SELECT COUNT(*), COUNT(DISTINCT context_id) FROM tasks") == [(2, 1)]
    assert not forgejo.calls("PATCH", "/api/v1/notifications/threads/")


def test_sigkill_after_acceptance_before_the_checkpoint_makes_no_second_task(
    spawn: Spawner, forgejo: FakeForgejo, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    forgejo.fail_patches = True  # accepted, but the revision is held before the checkpoint
    forgejo.notify(4, REPO, "Issue", 12)
    process = serve(spawn, forgejo, store)
    wait_for(lambda: len(forgejo.comments_on(REPO, 12)) == 1, "the comment", process)
    wait_for(
        lambda: len(forgejo.calls("PATCH", "/api/v1/notifications/threads/4")) >= 2,
        "retry",
        process,
    )
    sigkill(process)
    forgejo.fail_patches = False
    process = serve(spawn, forgejo, store)
    wait_for(lambda: forgejo.unread() == [], "mark-read after the restart", process)
    process.signal_and_wait(signal.SIGINT)
    assert store_rows(store, "SELECT COUNT(*) FROM tasks") == [(1,)]
    assert len(forgejo.comments_on(REPO, 12)) == 1


def test_a_dropped_comment_is_looked_up_not_posted_again(
    spawn: Spawner, forgejo: FakeForgejo, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    forgejo.drop_posts = 1
    forgejo.notify(5, REPO, "Issue", 13)
    process = serve(spawn, forgejo, store)
    wait_for_replies(store, ["delivered"], "the lookup", process)
    process.signal_and_wait(signal.SIGINT)
    (comment,) = forgejo.comments_on(REPO, 13)
    assert replies(store) == [("delivered", str(comment["id"]))]
    assert len(forgejo.calls("POST", f"/api/v1/repos/{REPO}/issues/13/comments")) == 1


def test_sigkill_leaving_sending_is_reconciled_by_listing_the_comments(
    spawn: Spawner, forgejo: FakeForgejo, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    forgejo.notify(6, REPO, "Issue", 14)
    process = serve(spawn, forgejo, store)
    kill_with_the_reply_sending(process, store)
    process = serve(spawn, forgejo, store)
    wait_for_replies(store, ["delivered"], "reconciled", process)
    process.signal_and_wait(signal.SIGINT)
    assert len(forgejo.comments_on(REPO, 14)) == 1
    assert forgejo.calls("GET", f"/api/v1/repos/{REPO}/issues/14/comments")


def test_refusals_and_rate_limits_are_retried_and_waited_for(
    spawn: Spawner, forgejo: FakeForgejo, tmp_path: Path
) -> None:
    forgejo.rate_limit_polls_s = 2
    forgejo.refuse_posts = 1
    forgejo.notify(7, REPO, "Issue", 15)
    process = serve(spawn, forgejo, tmp_path / "store")
    wait_for(lambda: len(forgejo.comments_on(REPO, 15)) == 1, "the first comment", process)
    first, second = forgejo.calls("GET", "/api/v1/notifications")[:2]
    assert second - first >= 1.5  # Retry-After: 2 was honoured
    forgejo.rate_limit_posts_s = 2
    forgejo.notify(8, REPO, "Issue", 16)
    wait_for(lambda: len(forgejo.comments_on(REPO, 16)) == 1, "the second comment", process)
    limited, after = forgejo.calls("POST", f"/api/v1/repos/{REPO}/issues/16/comments")
    assert after - limited >= 1.5
    events = event_names(process)
    assert "source_rate_limited" in events and "delivery_failed" in events
    time.sleep(1.5)
    assert len(forgejo.comments_on(REPO, 15)) == 1


def test_a_bad_token_fails_the_explicit_start(
    spawn: Spawner, forgejo: FakeForgejo, tmp_path: Path
) -> None:
    env = sources_env(
        spawn, tmp_path / "store", "forgejo", FORGEJO_URL=forgejo.url, FORGEJO_TOKEN="wrong"
    )
    process = spawn.start(("serve",), env)
    assert process.wait_exit() == 2
    assert "source forgejo failed to start" in process.stderr()
