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

The ``openai`` runtime keeps its transcripts through a :class:`TranscriptStore`:
:class:`FileTranscriptStore` (the layout above: one process owns the store root) on
SQLite, and on a PostgreSQL store one kept in the database, so that a continuation
woken on another node reopens the same conversation (design rule "Turn authority is
a lease": a transcript save is one of the turn's writes, refused once its lease
moved). The session *directories* of the ``subprocess`` and ``python`` runtimes are
the agent program's own files: they stay on the node that ran the turn
(:data:`NODE_LOCAL_SESSION_RUNTIMES`).
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import attrs
import trio

from taskplane.bridge.runtime import session_id
from taskplane.bridge.tool_api import TurnLease
from taskplane.durable_file import replace_file

log = logging.getLogger("taskplane.bridge.sessions")

SESSIONS_DIR = "agent-sessions"
TRANSCRIPT = "transcript.json"
TASK_ID_FILE = "task-id"
"""Names the session's Task (the session ID is a one-way hash of it)."""

NODE_LOCAL_SESSION_RUNTIMES = frozenset({"subprocess", "python"})
"""Runtimes whose session is a directory of the agent's own files under the store
root: on a store shared by several nodes it stays on the node that ran the turn, so
a continuation woken on another node starts a fresh directory there."""


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
    """One session's conversation: chat messages in order (plain JSON objects).

    ``version``: the stored version this copy was read or last saved as (0: never
    saved); kept by stores that several nodes share, 0 in the file store.
    """

    session_id: str
    task_id: str
    profile: Profile
    messages: list[dict[str, Any]]
    version: int = 0


class TranscriptStore(Protocol):
    """Where the ``openai`` runtime keeps its Task sessions' transcripts.

    Implementations: :class:`FileTranscriptStore` (SQLite: files under the store
    root) and the PostgreSQL one (:mod:`taskplane.cluster.transcripts`), chosen by
    the composition root with the task store.
    """

    async def open(self, task_id: str, profile: Profile) -> Transcript:
        """Reopen ``task_id``'s transcript, or start one with ``profile`` (the stored
        profile wins: a session keeps its profile for life).

        Raises:
            OSError, ValueError: the stored transcript cannot be read or parsed.
            StoreUnavailable: the database cannot be reached.
        """
        ...

    async def refresh(self, transcript: Transcript) -> Transcript:
        """``transcript`` if it is still the stored one, else the stored one (another
        node saved a later turn since this copy was read).

        Raises:
            as :meth:`open`.
        """
        ...

    async def save(self, transcript: Transcript, fence: TurnLease | None = None) -> None:
        """Replace the stored transcript atomically (shielded: a started save
        finishes), under the turn's lease ``fence`` (``None``: no lease).

        Raises:
            Fenced: ``fence`` is no longer current; the stored transcript is unchanged.
            VersionConflict: the stored transcript moved since ``transcript`` was
                read (reopen it); nothing was written.
            OSError, StoreUnavailable: the save failed.
        """
        ...


def transcript_document(transcript: Transcript) -> dict[str, Any]:
    """The stored shape ``{"sessionId", "taskId", "profile", "messages"}``
    (``profile``: ``{"model", "systemPrompt", "reasoningEffort"?}``)."""
    return {
        "sessionId": transcript.session_id,
        "taskId": transcript.task_id,
        "profile": profile_json(transcript.profile),
        "messages": list(transcript.messages),
    }


def profile_of(stored: dict[str, Any]) -> Profile:
    """The :class:`Profile` of its stored shape (see :func:`transcript_document`)."""
    return Profile(stored["model"], stored["systemPrompt"], stored.get("reasoningEffort"))


def log_opened(transcript: Transcript, *, created: bool) -> None:
    """Log ``task_session_created`` or ``task_session_reopened`` (with the stored
    profile's model)."""
    sid, task_id = transcript.session_id, transcript.task_id
    if created:
        log.info(
            "task session %s created",
            sid,
            extra={
                "event": "task_session_created",
                "taskId": task_id,
                "sessionId": sid,
                "model": transcript.profile.model,
            },
        )
        return
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


class FileTranscriptStore:
    """A :class:`TranscriptStore` of files under ``<store root>/agent-sessions``
    (one process owns the store root, so a transcript read is always current).

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
            log_opened(transcript, created=True)
            return transcript
        transcript = Transcript(sid, task_id, profile_of(raw["profile"]), raw["messages"])
        log_opened(transcript, created=False)
        return transcript

    async def refresh(self, transcript: Transcript) -> Transcript:
        """``transcript`` itself: only this process writes the store root's sessions."""
        return transcript

    async def save(self, transcript: Transcript, fence: TurnLease | None = None) -> None:
        """Replace the stored transcript atomically (shielded: a started save
        finishes). ``fence`` is not checked: one process, no lease can move."""
        document = transcript_document(transcript)
        data = json.dumps(document, ensure_ascii=False).encode("utf-8")
        path = session_dir(self.store_root, transcript.task_id) / TRANSCRIPT
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(partial(replace_file, path, data, private=True))


def profile_json(profile: Profile) -> dict[str, str]:
    """The stored shape of ``profile`` (see :func:`transcript_document`)."""
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
