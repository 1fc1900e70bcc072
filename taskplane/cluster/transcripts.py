"""The ``openai`` runtime's transcripts on a store shared by several nodes.

Design document, "Resident-agent bridge": a Task's session is reopened on every
later wake of that Task. With several nodes that wake may be claimed by any of
them, so the transcript is kept in the database
(:mod:`taskplane.store.sessions`; PostgreSQL's in
:mod:`taskplane.store.postgres.sessions`), not under one node's store root.
:class:`SharedTranscriptStore` is the :class:`~taskplane.bridge.sessions.TranscriptStore`
over it:

- every save is one transaction, made under the turn's lease (design rule "Turn
  authority is a lease"): a save whose lease moved raises
  :class:`~taskplane.errors.Fenced` and leaves the stored transcript as it was;
- every save is a compare-and-swap on the row's version, so a copy read before
  another node's turn saved cannot overwrite that turn
  (:class:`~taskplane.errors.VersionConflict`);
- :meth:`SharedTranscriptStore.refresh` rereads a copy kept from an earlier turn
  only when the stored version moved (one indexed read).

The stored messages are the runtime's JSON objects unchanged (the same document
the file store writes, split into its profile and messages).
"""

from __future__ import annotations

import json
from typing import Any

import trio

from taskplane.bridge.runtime import session_id
from taskplane.bridge.sessions import (
    Profile,
    Transcript,
    log_opened,
    profile_json,
    profile_of,
)
from taskplane.bridge.tool_api import TurnLease
from taskplane.store.records import Fence
from taskplane.store.sessions import SessionRow, SessionStore


class SharedTranscriptStore:
    """A :class:`~taskplane.bridge.sessions.TranscriptStore` in the database.

    Args:
        sessions: the agent sessions of the shared store.
    """

    def __init__(self, sessions: SessionStore) -> None:
        self._sessions = sessions

    async def open(self, task_id: str, profile: Profile) -> Transcript:
        """See :meth:`TranscriptStore.open`; a new transcript is not written until its
        first save (which is under the turn's lease).

        Raises:
            StoreUnavailable: the database could not be read.
            ValueError: the stored row is not a transcript.
        """
        row = await self._sessions.load(task_id)
        if row is None:
            transcript = Transcript(session_id(task_id), task_id, profile, [])
            log_opened(transcript, created=True)
            return transcript
        transcript = _transcript(row)
        log_opened(transcript, created=False)
        return transcript

    async def refresh(self, transcript: Transcript) -> Transcript:
        """See :meth:`TranscriptStore.refresh`."""
        row = await self._sessions.load(transcript.task_id, unless_version=transcript.version)
        return transcript if row is None else _transcript(row)

    async def save(self, transcript: Transcript, fence: TurnLease | None = None) -> None:
        """See :meth:`TranscriptStore.save`; ``transcript.version`` becomes the saved
        version.

        Raises:
            Fenced: ``fence`` is no longer current; nothing was written.
            VersionConflict: the stored transcript moved since ``transcript`` was read.
            StoreUnavailable: the transaction could not commit.
        """
        row = SessionRow(
            transcript.task_id,
            transcript.session_id,
            json.dumps(profile_json(transcript.profile), ensure_ascii=False),
            json.dumps(transcript.messages, ensure_ascii=False),
            transcript.version,
        )
        lease = None if fence is None else Fence(fence.activation_id, fence.epoch, fence.node_id)
        # Shielded, as the file store's save: the new version must be learnt once sent.
        with trio.CancelScope(shield=True):
            transcript.version = await self._sessions.save(row, lease)


def _transcript(row: SessionRow) -> Transcript:
    profile: Any = json.loads(row.profile_json)
    messages: Any = json.loads(row.messages_json)
    if not isinstance(profile, dict) or not isinstance(messages, list):
        raise ValueError(f"the agent session of task {row.task_id} is not a transcript")
    return Transcript(row.session_id, row.task_id, profile_of(profile), messages, row.version)
