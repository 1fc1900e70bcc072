"""Durable acceptance, persistence failures, store lock and versioning, retention.

Faults are real SQLite failures raised in the store's connection layer
(``tests/store/faults.py``), not a mock of the store.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from pathlib import Path

import pytest

from taskplane.app import PlaneOptions
from taskplane.errors import StoreLocked, StoreVersionError
from taskplane.scope import Scope
from taskplane.store.records import RETENTION_MS
from taskplane.store.sqlite.database import DATABASE_FILE_NAME, Database
from taskplane.store.sqlite.schema import SCHEMA_VERSION
from tests.store.faults import Faults, faulty_connection, page_limited_connection
from tests.support.plane import in_process_client, make_app, open_test_plane, send_body


def rows(store_root: Path, sql: str) -> list[tuple[object, ...]]:
    """Read the database directly (after the plane is closed)."""
    with sqlite3.connect(store_root / DATABASE_FILE_NAME) as conn:
        return conn.execute(sql).fetchall()


async def test_one_acceptance_commits_claim_task_history_origin_evidence_and_accepted(
    store_root: Path,
) -> None:
    async with open_test_plane(store_root) as plane, in_process_client(make_app(plane)) as c:
        response = await c.post(
            "/message:send",
            json=send_body("ask: colour?", "m-1", configuration={"returnImmediately": True}),
        )
        task_id = response.json()["task"]["id"]
    kinds = [k for (k,) in rows(store_root, "SELECT kind FROM journal ORDER BY seq")]
    assert kinds[:2] == ["CLAIM", "ACCEPTED"]
    ((claim_json,),) = rows(store_root, "SELECT record_json FROM journal WHERE kind='CLAIM'")
    claim = json.loads(claim_json)
    assert claim["taskId"] == task_id and claim["intendedRoute"] == "created"
    ((relation, locator_json),) = rows(store_root, "SELECT relation, locator_json FROM origins")
    assert relation == "created"
    assert json.loads(locator_json) == {
        "agentInterface": "http://127.0.0.1:8788",
        "protocolBinding": "HTTP+JSON",
        "protocolVersion": "1.0",
        "taskId": task_id,
    }
    evidence = rows(store_root, "SELECT record_type, task_id FROM evidence")
    assert ("task.activation", task_id) in evidence
    ((task_json,),) = rows(store_root, "SELECT task_json FROM tasks")
    assert json.loads(task_json)["history"][0]["messageId"] == "m-1"


@pytest.mark.parametrize("fault", ["commit", "locked", "writes"])
async def test_persistence_failure_answers_503_records_nothing_and_a_retry_succeeds(
    store_root: Path, fault: str
) -> None:
    """commit: COMMIT fails with an I/O error; locked: BEGIN finds the database locked;
    writes: every INSERT/UPDATE finds the disk full."""
    faults = Faults()
    options = PlaneOptions(connection_factory=faulty_connection(faults))
    async with (
        open_test_plane(store_root, options) as plane,
        in_process_client(make_app(plane)) as c,
    ):
        setattr(faults, fault, True)
        failed = await c.post("/message:send", json=send_body("hello", "m-1"))
        assert failed.status_code == 503
        assert failed.headers["Retry-After"] == "1"
        assert failed.json()["error"]["status"] == "UNAVAILABLE"
        assert faults.raised >= 1
        setattr(faults, fault, False)
        listed = await c.get("/tasks")
        assert listed.json()["totalSize"] == 0
        retried = await c.post("/message:send", json=send_body("hello", "m-1"))
        assert retried.status_code == 200
        assert retried.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert rows(store_root, "SELECT COUNT(*) FROM tasks") == [(1,)]


async def test_a_full_disk_fails_the_send_cleanly_and_keeps_earlier_data(store_root: Path) -> None:
    async with open_test_plane(store_root) as plane, in_process_client(make_app(plane)) as c:
        first = await c.post("/message:send", json=send_body("kept", "m-0"))
        kept_id = first.json()["task"]["id"]
    ((pages,),) = rows(store_root, "PRAGMA page_count")
    options = PlaneOptions(connection_factory=page_limited_connection(int(pages)))  # type: ignore[call-overload]
    async with (
        open_test_plane(store_root, options) as plane,
        in_process_client(make_app(plane)) as c,
    ):
        big = "x" * 200_000
        failed = await c.post("/message:send", json=send_body(big, "m-big"))
        assert failed.status_code == 503, failed.text
        assert "full" in failed.json()["error"]["message"]
        still = await c.get(f"/tasks/{kept_id}")
        assert still.status_code == 200
        assert still.json()["artifacts"][0]["parts"][0]["text"] == "kept"
    assert rows(store_root, "SELECT COUNT(*) FROM tasks") == [(1,)]
    assert rows(store_root, "PRAGMA integrity_check") == [("ok",)]


async def test_store_survives_restart_with_tasks_and_dedupe_intact(store_root: Path) -> None:
    async with open_test_plane(store_root) as plane, in_process_client(make_app(plane)) as c:
        task = (await c.post("/message:send", json=send_body("hello", "m-1"))).json()["task"]
        direct = (await c.post("/message:send", json=send_body("ping", "m-2"))).json()
    async with open_test_plane(store_root) as plane, in_process_client(make_app(plane)) as c:
        again = (await c.post("/message:send", json=send_body("hello", "m-1"))).json()["task"]
        assert again == task
        assert (await c.post("/message:send", json=send_body("ping", "m-2"))).json() == direct
        conflict = await c.post("/message:send", json=send_body("other", "m-1"))
        assert conflict.status_code == 409


async def test_a_second_process_on_the_same_store_root_fails_naming_root_and_pid(
    store_root: Path,
) -> None:
    first = Database(store_root)
    try:
        with pytest.raises(StoreLocked) as raised:
            Database(store_root)
        assert str(store_root) in str(raised.value)
        assert str(os.getpid()) in str(raised.value)
    finally:
        first.close()
    Database(store_root).close()  # released: opens again


def test_a_store_written_by_a_newer_version_fails_clearly(store_root: Path) -> None:
    Database(store_root).close()
    with sqlite3.connect(store_root / DATABASE_FILE_NAME) as conn:
        conn.execute(
            "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),)
        )
    with pytest.raises(StoreVersionError, match="upgrade taskplane"):
        Database(store_root)


def test_store_root_is_private(store_root: Path) -> None:
    Database(store_root).close()
    assert stat.S_IMODE(store_root.stat().st_mode) == 0o700
    assert stat.S_IMODE((store_root / DATABASE_FILE_NAME).stat().st_mode) == 0o600


class Clock:
    """A settable wall clock in ms."""

    def __init__(self, now_ms: int) -> None:
        self.now = now_ms

    def __call__(self) -> int:
        return self.now


async def test_reaccepts_a_duplicate_whose_referenced_task_was_pruned(store_root: Path) -> None:
    clock = Clock(1_800_000_000_000)
    options = PlaneOptions(now_ms=clock)
    async with (
        open_test_plane(store_root, options) as plane,
        in_process_client(make_app(plane)) as c,
    ):
        old = (await c.post("/message:send", json=send_body("hello", "m-1"))).json()["task"]
        assert old["status"]["state"] == "TASK_STATE_COMPLETED"
    clock.now += RETENTION_MS + 1
    async with (
        open_test_plane(store_root, options) as plane,
        in_process_client(make_app(plane)) as c,
    ):
        assert (await c.get(f"/tasks/{old['id']}")).status_code == 404
        new = (await c.post("/message:send", json=send_body("hello", "m-1"))).json()["task"]
        assert new["id"] != old["id"]
        assert new["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_retention_keeps_live_tasks_their_contexts_claims_and_sending_deliveries(
    store_root: Path,
) -> None:
    clock = Clock(1_800_000_000_000)
    options = PlaneOptions(now_ms=clock)
    async with (
        open_test_plane(store_root, options) as plane,
        in_process_client(make_app(plane)) as c,
    ):
        waiting = (await c.post("/message:send", json=send_body("ask: q", "m-live"))).json()
        done = (await c.post("/message:send", json=send_body("hi", "m-done"))).json()
    waiting_id, done_id = waiting["task"]["id"], done["task"]["id"]
    with sqlite3.connect(store_root / DATABASE_FILE_NAME) as conn:
        for delivery, state in (("d-sending", "sending"), ("d-old", "delivered")):
            conn.execute(
                "INSERT INTO deliveries (delivery_id, task_id, source, operation_id,"
                " payload_digest, recovery, state, updated_at_ms) VALUES"
                " (?, ?, 'slack', 'reply:x', 'sha256:0', 'lookup', ?, ?)",
                (delivery, done_id, state, clock.now),
            )
    clock.now += RETENTION_MS + 1
    async with open_test_plane(store_root, options) as plane:
        assert (await plane.get_task(Scope("", "alpha"), waiting_id)).id == waiting_id
    assert rows(store_root, "SELECT task_id FROM tasks") == [(waiting_id,)]
    claims = rows(store_root, "SELECT task_id FROM journal WHERE kind = 'CLAIM'")
    assert claims == [(waiting_id,)]
    contexts = rows(store_root, "SELECT context_id FROM contexts")
    assert contexts == [(waiting["task"]["contextId"],)]
    assert rows(store_root, "SELECT delivery_id FROM deliveries") == [("d-sending",)]


async def test_legacy_store_path_is_warned_about_and_not_merged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import trio

    from taskplane.config import Config
    from taskplane.server import run_server

    legacy = tmp_path / "tasks.json"
    legacy.write_text('{"version": 1, "tasks": {}}')
    config = Config(store_root=tmp_path / "store", legacy_store_path=str(legacy))
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: run_server(config, shutdown=shutdown, task_status=task_status)
        )
        shutdown.set()
    events = [getattr(r, "event", None) for r in caplog.records]
    assert "a2a_legacy_store_ignored" in events
    assert legacy.read_text() == '{"version": 1, "tasks": {}}'
