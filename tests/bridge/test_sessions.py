"""Durable task sessions: directory layout, atomic transcripts, the model profile kept
for the session's life, and retention with the Task (startup compaction)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import httpx
import pytest

from taskplane.app import PlaneOptions
from taskplane.bridge.runtime import session_id
from taskplane.bridge.sessions import (
    SESSIONS_DIR,
    TRANSCRIPT,
    FileTranscriptStore,
    Profile,
    ensure_session_dir,
)
from taskplane.store.records import RETENTION_MS
from tests.support.plane import auth, make_app, open_test_plane, send_body


def test_the_session_id_is_task_and_40_hex_of_sha256() -> None:
    # sha256("abc") = ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad
    assert session_id("abc") == "task-ba7816bf8f01cfea414140de5dae2223b00361a3"


async def test_a_transcript_is_created_then_reopened_with_its_own_profile(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = FileTranscriptStore(tmp_path)
    caplog.set_level(logging.INFO, "taskplane.bridge.sessions")
    created = await store.open("t-1", Profile("model-a", "prompt A"))
    created.messages.append({"role": "user", "content": "wake"})
    await store.save(created)
    reopened = await FileTranscriptStore(tmp_path).open("t-1", Profile("model-b", "prompt B"))
    assert reopened.profile == Profile("model-a", "prompt A")
    assert reopened.messages == [{"role": "user", "content": "wake"}]
    events = [getattr(r, "event", None) for r in caplog.records]
    assert events == ["task_session_created", "task_session_reopened"]
    path = tmp_path / SESSIONS_DIR / session_id("t-1") / TRANSCRIPT
    document = json.loads(path.read_text())
    assert document["sessionId"] == session_id("t-1") and document["taskId"] == "t-1"
    assert path.stat().st_mode & 0o777 == 0o600
    assert not list(path.parent.glob("*.tmp"))


async def test_a_torn_temporary_file_never_replaces_the_transcript(tmp_path: Path) -> None:
    store = FileTranscriptStore(tmp_path)
    transcript = await store.open("t-2", Profile("m", "p"))
    transcript.messages.append({"role": "user", "content": "kept"})
    await store.save(transcript)
    directory = tmp_path / SESSIONS_DIR / session_id("t-2")
    (directory / (TRANSCRIPT + ".tmp")).write_text('{"torn')  # a crash mid-write
    again = await FileTranscriptStore(tmp_path).open("t-2", Profile("m", "p"))
    assert again.messages == [{"role": "user", "content": "kept"}]


async def test_a_task_session_is_pruned_with_its_task(tmp_path: Path) -> None:
    root = tmp_path / "store"
    clock = [1_700_000_000_000]
    options = PlaneOptions(now_ms=lambda: clock[0])
    async with open_test_plane(root, options) as plane:
        transport = httpx.ASGITransport(app=make_app(plane))
        async with httpx.AsyncClient(transport=transport, base_url="http://t", headers=auth()) as c:
            response = await c.post("/message:send", json=send_body("hello", "prune-1"))
    task = response.json()["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    kept = await ensure_session_dir(root, task["id"])
    orphan = root / SESSIONS_DIR / ("task-" + "0" * 40)
    orphan.mkdir()
    async with open_test_plane(root, options):
        pass
    assert kept.is_dir() and not orphan.exists()
    clock[0] += RETENTION_MS + 1_000
    async with open_test_plane(root, options):
        pass
    assert not kept.exists()
