"""Startup compaction and wake replay, record by record, on a real SQLite file.

Design rules "Operational records are compacted at startup" and "Wake recovery
follows durable Task state": which journal records compaction removes (an accepted
claim whose Task is gone, an old Task-less claim, old records of an activation with
no claim) and keeps (a pending claim, a recent Task-less claim, the claims of a kept
Task), and which activation replay offers (the newest accepted claim of each live
Task only).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from taskplane.model.enums import Role, TaskState
from taskplane.model.lifecycle import new_task
from taskplane.model.types import Message, Part, TaskStatus
from taskplane.scope import Scope
from taskplane.store.records import RETENTION_MS
from taskplane.store.sqlite import journal, tasks
from taskplane.store.sqlite.compaction import compact
from taskplane.store.sqlite.database import Database

NOW = 1_800_000_000_000
OLD = NOW - RETENTION_MS - 1
RECENT = NOW - 1_000
SCOPE = Scope("", "alpha")


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database(tmp_path / "store")
    try:
        yield database
    finally:
        database.close()


def add_task(db: Database, task_id: str, state: TaskState, at: int) -> None:
    message = Message(message_id=f"m-{task_id}", role=Role.ROLE_USER, parts=(Part.from_text("x"),))
    task = new_task(task_id, f"ctx-{task_id}", message, at)
    status = TaskStatus(state=state, timestamp=task.status.timestamp)
    tasks.insert(db.conn, attrs.evolve(task, status=status), SCOPE, "a2a", at)


def add(db: Database, activation: str, task_id: str | None, kinds: str, at: int) -> None:
    for kind in kinds.split():
        key = f"key-{activation}" if kind == "CLAIM" else None
        journal.append(db.conn, kind, activation, {}, at, task_id=task_id, key=key)


def activations(db: Database) -> set[str]:
    return {a for (a,) in db.conn.execute("SELECT DISTINCT activation_id FROM journal")}


def test_compaction_removes_exactly_the_records_retention_no_longer_keeps(
    db: Database,
) -> None:
    add_task(db, "live", TaskState.TASK_STATE_WORKING, OLD)
    add(db, "gone-accepted", "missing", "CLAIM ACCEPTED WOKEN", RECENT)
    add(db, "gone-quarantined", "missing-2", "CLAIM QUARANTINED", RECENT)
    add(db, "gone-pending", "missing-3", "CLAIM", OLD)
    add(db, "direct-old", None, "CLAIM ACCEPTED", OLD)
    add(db, "direct-recent", None, "CLAIM ACCEPTED", RECENT)
    add(db, "direct-pending-old", None, "CLAIM", OLD)
    add(db, "claimless-old", "live", "WOKEN WAKE_DELIVERED", OLD)
    add(db, "claimless-recent", "live", "WOKEN", RECENT)
    add(db, "kept-task", "live", "CLAIM ACCEPTED WOKEN", OLD)

    report = compact(db.conn, NOW)

    assert activations(db) == {
        "gone-pending",
        "direct-recent",
        "direct-pending-old",
        "claimless-recent",
        "kept-task",
    }
    # gone-accepted 3 + gone-quarantined 2 + direct-old 2 + claimless-old 2
    assert report.journal == 9


def test_replay_offers_the_newest_accepted_claim_of_each_live_task(db: Database) -> None:
    add_task(db, "working", TaskState.TASK_STATE_WORKING, RECENT)
    add_task(db, "done", TaskState.TASK_STATE_COMPLETED, RECENT)
    add_task(db, "failed-wake", TaskState.TASK_STATE_WORKING, RECENT)
    add_task(db, "asked", TaskState.TASK_STATE_INPUT_REQUIRED, RECENT)
    add(db, "working-1", "working", "CLAIM ACCEPTED WOKEN", RECENT)
    add(db, "working-2", "working", "CLAIM ACCEPTED", RECENT)
    add(db, "done-1", "done", "CLAIM ACCEPTED", RECENT)
    add(db, "failed-1", "failed-wake", "CLAIM ACCEPTED WAKE_FAILED", RECENT)
    add(db, "asked-1", "asked", "CLAIM ACCEPTED WOKEN", RECENT)
    add(db, "orphan-1", "no-such-task", "CLAIM ACCEPTED", RECENT)

    pending = journal.replayable_activations(db.conn)

    assert [(p.activation_id, p.task_id, p.context_id) for p in pending] == [
        ("working-2", "working", "ctx-working")
    ]
