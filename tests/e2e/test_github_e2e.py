"""The GitHub notifications source end to end: ``taskplane serve`` against a fake
GitHub REST API on a loopback port, with the scripted agent."""

from __future__ import annotations

import itertools
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e._support import (
    event_names,
    leave_replies_sending,
    logged,
    serving,
    sigkill,
    sources_env,
    store_rows,
    wait_for,
)
from tests.e2e.fake_github import FakeGitHub
from tests.e2e.taskplane_proc import Spawner, TaskplaneProcess

pytestmark = pytest.mark.slow

REPO = "acme/widgets"


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    yield from serving(FakeGitHub())


def serve(spawn: Spawner, github: FakeGitHub, store: Path, **extra: str) -> TaskplaneProcess:
    env = sources_env(
        spawn,
        store,
        "github",
        GITHUB_TOKEN="gh-test-token",
        GITHUB_API_URL=github.url,
        GITHUB_POLL_INTERVAL_S="1",
        **extra,
    )
    process = spawn.start(("serve",), env)
    wait_for(lambda: "source_started" in event_names(process), "source_started", process)
    return process


def delivered(store: Path) -> int:
    (row,) = store_rows(store, "SELECT COUNT(*) FROM deliveries WHERE state = 'delivered'")
    return int(str(row[0]))


def test_a_mention_becomes_a_task_and_one_comment_on_the_exact_issue(
    spawn: Spawner, github: FakeGitHub, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    github.notify("101", REPO, "Issue", 7, comment="please summarise")
    process = serve(spawn, github, store)
    wait_for(lambda: len(github.comments_on(REPO, 7)) == 1, "the comment", process)
    wait_for(lambda: github.requests("PATCH", "/notifications/threads/101"), "mark-read", process)
    wait_for(lambda: delivered(store) == 2, "both deliveries recorded", process)
    (comment,) = github.comments_on(REPO, 7)
    assert "please summarise" in comment["body"]
    assert "<!-- taskplane-delivery: delivery-" in comment["body"]
    assert process.signal_and_wait(signal.SIGINT) == 0
    assert store_rows(store, "SELECT source, state FROM tasks") == [
        ("github", "TASK_STATE_COMPLETED")
    ]
    ops = dict(store_rows(store, "SELECT operation_id, state FROM deliveries"))
    assert ops[next(o for o in ops if str(o).startswith("mark-read:101@"))] == "delivered"
    reply = store_rows(
        store, "SELECT provider_response_id FROM deliveries WHERE operation_id LIKE 'reply:%'"
    )
    assert reply == [(str(comment["id"]),)]
    (cp,) = store_rows(store, "SELECT principal, value_json FROM source_checkpoints")
    assert str(cp[0]).startswith("github:") and json.loads(str(cp[1]))["lastModified"]
    assert github.comments_on(REPO, 7) == [comment]


def test_non_work_and_foreign_owners_are_evidence_not_tasks(
    spawn: Spawner, github: FakeGitHub, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    github.notify("201", REPO, "Release", 3)
    github.notify("202", "other/thing", "Issue", 4)
    process = serve(spawn, github, store, GITHUB_NOTIFY_ORGS="acme")
    wait_for(
        lambda: (
            (store / "taskplane.sqlite3").exists()
            and len(store_rows(store, "SELECT 1 FROM source_checkpoints")) == 1
        ),
        "the checkpoint",
        process,
    )
    process.signal_and_wait(signal.SIGINT)
    kinds = sorted(
        json.loads(str(r[0]))["classification"]
        for r in store_rows(
            store, "SELECT record_json FROM evidence WHERE record_type = 'source.evidence'"
        )
    )
    assert kinds == ["non-work", "owner-not-allowed"]
    assert store_rows(store, "SELECT COUNT(*) FROM tasks") == [(0,)]


def test_a_refused_comment_is_retried_and_posted_once(
    spawn: Spawner, github: FakeGitHub, tmp_path: Path
) -> None:
    github.state.refuse_posts = 1
    github.notify("301", REPO, "PullRequest", 9)
    process = serve(spawn, github, tmp_path / "store")
    wait_for(lambda: len(github.comments_on(REPO, 9)) == 1, "the comment", process)
    assert len(github.requests("POST", f"/repos/{REPO}/issues/9/comments")) == 2
    assert "delivery_failed" in logged(process, "delivery_failed")
    time.sleep(1.5)  # a second comment would need another poll and delivery round
    assert len(github.comments_on(REPO, 9)) == 1


def test_a_dropped_answer_is_looked_up_not_posted_again(
    spawn: Spawner, github: FakeGitHub, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    github.state.drop_posts = 1
    github.notify("401", REPO, "Issue", 11)
    process = serve(spawn, github, store)
    wait_for(
        lambda: (
            (store / "taskplane.sqlite3").exists()
            and ("delivered",)
            in store_rows(store, "SELECT state FROM deliveries WHERE operation_id LIKE 'reply:%'")
        ),
        "the reconciled delivery",
        process,
    )
    assert len(github.comments_on(REPO, 11)) == 1
    assert len(github.requests("POST", f"/repos/{REPO}/issues/11/comments")) == 1
    assert github.requests("GET", f"/repos/{REPO}/issues/11/comments")


def test_sigkill_before_mark_read_makes_no_second_task(
    spawn: Spawner, github: FakeGitHub, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    github.state.fail_patches = True
    github.notify("501", REPO, "Issue", 12)
    process = serve(spawn, github, store)
    wait_for(lambda: len(github.comments_on(REPO, 12)) == 1, "the comment", process)
    sigkill(process)  # accepted, answered, but the notification is still unread
    github.state.fail_patches = False
    process = serve(spawn, github, store)
    wait_for(lambda: not github.state.threads, "mark-read after the restart", process)
    process.signal_and_wait(signal.SIGINT)
    assert store_rows(store, "SELECT COUNT(*) FROM tasks") == [(1,)]
    assert len(github.comments_on(REPO, 12)) == 1


def test_sigkill_between_sending_and_delivered_is_reconciled_by_lookup(
    spawn: Spawner, github: FakeGitHub, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    github.notify("601", REPO, "Issue", 13)
    process = serve(spawn, github, store)
    wait_for(lambda: len(github.comments_on(REPO, 13)) == 1, "the comment", process)
    sigkill(process)
    leave_replies_sending(store)
    process = serve(spawn, github, store)
    wait_for(
        lambda: (
            store_rows(store, "SELECT state FROM deliveries WHERE operation_id LIKE 'reply:%'")
            == [("delivered",)]
        ),
        "the reconciliation",
        process,
    )
    process.signal_and_wait(signal.SIGINT)
    assert len(github.comments_on(REPO, 13)) == 1
    assert len(github.requests("POST", f"/repos/{REPO}/issues/13/comments")) == 1


def test_a_rate_limit_waits_until_the_reset(
    spawn: Spawner, github: FakeGitHub, tmp_path: Path
) -> None:
    github.state.rate_limit_for_s = 3
    process = serve(spawn, github, tmp_path / "store")
    wait_for(lambda: len(github.requests("GET", "/notifications")) >= 2, "the retry", process)
    first, second = github.requests("GET", "/notifications")[:2]
    assert second - first >= 1.5
    assert "source_rate_limited" in logged(process, "source_rate_limited")


def test_bad_credentials_fail_the_explicit_start(
    spawn: Spawner, github: FakeGitHub, tmp_path: Path
) -> None:
    env = sources_env(
        spawn, tmp_path / "store", "github", GITHUB_TOKEN="wrong", GITHUB_API_URL=github.url
    )
    process = spawn.start(("serve",), env)
    assert process.wait_exit() == 2
    assert "source github failed to start" in process.stderr()


def test_polls_are_conditional_and_honour_a_longer_x_poll_interval(
    spawn: Spawner, github: FakeGitHub, tmp_path: Path
) -> None:
    github.state.poll_interval_s = 3  # longer than GITHUB_POLL_INTERVAL_S=1
    process = serve(spawn, github, tmp_path / "store")
    wait_for(lambda: len(github.requests("GET", "/notifications")) >= 3, "three polls", process)
    polls = github.requests("GET", "/notifications")[:3]
    assert all(later - earlier >= 2.5 for earlier, later in itertools.pairwise(polls))
    first, *later = github.state.conditional[:3]
    assert first is None and all(later), github.state.conditional  # If-Modified-Since


def test_a_rate_limited_comment_waits_for_retry_after(
    spawn: Spawner, github: FakeGitHub, tmp_path: Path
) -> None:
    github.state.rate_limit_posts_s = 3
    github.notify("701", REPO, "Issue", 14)
    process = serve(spawn, github, tmp_path / "store")
    wait_for(lambda: len(github.comments_on(REPO, 14)) == 1, "the comment", process)
    first, second = github.requests("POST", f"/repos/{REPO}/issues/14/comments")
    assert second - first >= 2.5


def test_a_notification_over_the_message_limit_is_refused_with_evidence(
    spawn: Spawner, github: FakeGitHub, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    github.notify("301", REPO, "Issue", 8, comment="x" * 300_000)
    github.notify("302", REPO, "Issue", 9, comment="fits")
    process = serve(spawn, github, store)
    wait_for(lambda: len(github.comments_on(REPO, 9)) == 1, "the small one answered", process)
    wait_for(
        lambda: bool(
            store_rows(store, "SELECT 1 FROM evidence WHERE record_type = 'source.evidence'")
        ),
        "the evidence",
        process,
    )
    process.signal_and_wait(signal.SIGINT)
    (evidence,) = store_rows(
        store, "SELECT record_json FROM evidence WHERE record_type = 'source.evidence'"
    )
    record = json.loads(str(evidence[0]))
    assert record["classification"] == "refused" and record["threadId"] == "301"
    assert "limit of 262144 bytes per message" in record["error"]
    assert store_rows(store, "SELECT COUNT(*) FROM tasks") == [(1,)]
    assert github.comments_on(REPO, 8) == []
