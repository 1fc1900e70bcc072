"""Durable task sessions: one directory per Task session under the store root.

Design document, "Resident-agent bridge": each Task gets its own durable agent
session, ID ``task-`` + first 40 hex of SHA-256(taskId), reopened on every later
wake of that Task (after an answer, a crash or a restart) and created with the model
profile in force then. Layout::

    <store root>/agent-sessions/<session id>/            the session directory
    <store root>/agent-sessions/<session id>/task-id     the Task ID (retention)
    <store root>/agent-sessions/<session id>/transcript.json

``transcript.json`` is ``{"sessionId", "taskId", "profile", "messages"}`` (``profile``:
``{"model", "systemPrompt", "reasoningEffort"?}``), replaced
atomically (temporary file, fsync, rename, directory fsync) off the trio thread, so a
crash leaves either the old or the new transcript, never a torn one.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import trio

from taskplane.bridge.runtime import session_id
from taskplane.durable_file import replace_file

log = logging.getLogger("taskplane.bridge.sessions")

SESSIONS_DIR = "agent-sessions"
TRANSCRIPT = "transcript.json"
TASK_ID_FILE = "task-id"
"""Names the session's Task (the session ID is a one-way hash of it)."""


def session_dir(store_root: Path, task_id: str) -> Path:
    """``<store root>/agent-sessions/<session id>`` (not created here)."""
    return store_root / SESSIONS_DIR / session_id(task_id)


async def ensure_session_dir(store_root: Path, task_id: str) -> Path:
    """Create (mode 0700, with its ``task-id`` file) and return ``task_id``'s session
    directory."""
    path = session_dir(store_root, task_id)
    await trio.to_thread.run_sync(_create, path, task_id)
    return path


def _create(path: Path, task_id: str) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    marker = path / TASK_ID_FILE
    if not marker.exists():
        replace_file(marker, task_id.encode("utf-8"), private=True)


@attrs.frozen
class Profile:
    """The model profile a session was created with (kept for its whole life).

    Attributes:
        model: the model name (``A2A_AGENT_MODEL``).
        system_prompt: the system prompt's text.
        reasoning_effort: the model's reasoning effort, "thinking level" in the design
            document (``A2A_AGENT_REASONING_EFFORT``), or ``None``: the provider's default.
    """

    model: str
    system_prompt: str
    reasoning_effort: str | None = None

    def options(self) -> dict[str, Any]:
        """Extra chat-completions arguments: ``{"reasoning_effort": ...}`` when set."""
        if self.reasoning_effort is None:
            return {}
        return {"reasoning_effort": self.reasoning_effort}


@attrs.define
class Transcript:
    """One session's conversation: chat messages in order (plain JSON objects)."""

    session_id: str
    task_id: str
    profile: Profile
    messages: list[dict[str, Any]]


class TranscriptStore:
    """Loads and saves transcripts under ``<store root>/agent-sessions``.

    Args:
        store_root: the task plane's store root directory.
    """

    def __init__(self, store_root: Path) -> None:
        self.store_root = store_root

    async def open(self, task_id: str, profile: Profile) -> Transcript:
        """Reopen ``task_id``'s transcript, or create one with ``profile``.

        Logs ``task_session_reopened`` (with the stored profile, which wins over
        ``profile``) or ``task_session_created``.
        Raises:
            OSError, ValueError: the stored transcript cannot be read or parsed.
        """
        directory = await ensure_session_dir(self.store_root, task_id)
        raw = await trio.to_thread.run_sync(_read, directory / TRANSCRIPT)
        sid = session_id(task_id)
        if raw is None:
            transcript = Transcript(sid, task_id, profile, [])
            await self.save(transcript)
            log.info(
                "task session %s created",
                sid,
                extra={
                    "event": "task_session_created",
                    "taskId": task_id,
                    "sessionId": sid,
                    "model": profile.model,
                },
            )
            return transcript
        stored = raw["profile"]
        kept = Profile(stored["model"], stored["systemPrompt"], stored.get("reasoningEffort"))
        transcript = Transcript(sid, task_id, kept, raw["messages"])
        log.info(
            "task session %s reopened",
            sid,
            extra={
                "event": "task_session_reopened",
                "taskId": task_id,
                "sessionId": sid,
                "model": transcript.profile.model,
                "messages": len(transcript.messages),
            },
        )
        return transcript

    async def save(self, transcript: Transcript) -> None:
        """Replace the stored transcript atomically (shielded: a started save finishes)."""
        document = {
            "sessionId": transcript.session_id,
            "taskId": transcript.task_id,
            "profile": _profile_json(transcript.profile),
            "messages": list(transcript.messages),
        }
        data = json.dumps(document, ensure_ascii=False).encode("utf-8")
        path = session_dir(self.store_root, transcript.task_id) / TRANSCRIPT
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(partial(replace_file, path, data, private=True))


def _profile_json(profile: Profile) -> dict[str, str]:
    document = {"model": profile.model, "systemPrompt": profile.system_prompt}
    if profile.reasoning_effort is not None:
        document["reasoningEffort"] = profile.reasoning_effort
    return document


_SESSION_NAME = re.compile(r"^task-[0-9a-f]{40}$")


def list_sessions(store_root: Path) -> list[tuple[Path, str | None]]:
    """Every session directory with the Task ID its ``task-id`` file names (``None``
    if it has none). Blocking: run in a worker thread."""
    base = store_root / SESSIONS_DIR
    if not base.is_dir():
        return []
    out: list[tuple[Path, str | None]] = []
    for entry in sorted(base.iterdir()):
        if entry.is_dir() and _SESSION_NAME.match(entry.name):
            try:
                task_id: str | None = (entry / TASK_ID_FILE).read_text(encoding="utf-8")
            except FileNotFoundError:
                task_id = None
            out.append((entry, task_id))
    return out


def remove_session(directory: Path) -> None:
    """Delete one session directory and its files. Blocking: run in a worker thread."""
    shutil.rmtree(directory)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    document = json.loads(data)
    if not isinstance(document, dict) or not isinstance(document.get("messages"), list):
        raise ValueError(f"{path}: not a task session transcript")
    return document
