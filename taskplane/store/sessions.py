"""The agent-session store contract: the ``openai`` runtime's transcripts kept in a
store that several nodes share.

One :class:`SessionRow` per Task session, replaced whole by compare-and-swap on its
``version`` and under the turn's fence (design rule "Turn authority is a lease": a
session write is one of the turn's writes). The same rules as
:mod:`taskplane.store.contract` hold: each operation is atomic, answered after its
commit, and may also raise ``StoreUnavailable`` or ``ActorGone``. Rows are pruned
with their Task by the store's compaction. Only the PostgreSQL backend implements
it (a SQLite store root belongs to one process, whose sessions are files).
"""

from __future__ import annotations

from typing import Protocol

import attrs

from taskplane.store.records import Fence


@attrs.frozen
class SessionRow:
    """One stored Task session.

    Attributes:
        task_id: the session's Task.
        session_id: ``task-`` + 40 hex (see :func:`taskplane.bridge.runtime.session_id`).
        profile_json: the model profile, JSON text.
        messages_json: the messages, a JSON array's text (as the runtime wrote it).
        version: the stored version (1 after the first save; 0: none stored).
    """

    task_id: str
    session_id: str
    profile_json: str
    messages_json: str
    version: int


class SessionStore(Protocol):
    """Agent sessions of a shared store."""

    async def load(self, task_id: str, unless_version: int = 0) -> SessionRow | None:
        """``task_id``'s session, or ``None`` when it has none or its stored version
        is ``unless_version`` (the caller's copy is current)."""
        ...

    async def save(self, row: SessionRow, fence: Fence | None) -> int:
        """Replace the session stored at version ``row.version`` (0: none stored
        yet) with ``row``, atomically; return the new version.

        Args:
            fence: the turn's lease, checked in the same transaction; ``None``: a
                write under no lease.
        Raises:
            Fenced: ``fence`` is no longer current; nothing was written.
            VersionConflict: the stored version is not ``row.version``; nothing was
                written.
        """
        ...
