"""The turns running now, so a cancel can stop its Task's turn at once.

Shared by the wake actor (which runs each turn inside :meth:`RunningTurns.running`)
and the per-task owners (a committed cancel calls :meth:`RunningTurns.interrupt`
from inside owner(T), so the turn stops even if the canceling caller has already
hung up). Design rule "Cancel stops the running turn".
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import trio


class RunningTurns:
    """Task ID -> the cancel scope of its running turn (at most one per Task)."""

    def __init__(self) -> None:
        self._scopes: dict[str, trio.CancelScope] = {}

    def __len__(self) -> int:
        """Turns running now."""
        return len(self._scopes)

    def __contains__(self, task_id: object) -> bool:
        """``task_id`` has a turn running now."""
        return task_id in self._scopes

    @contextmanager
    def running(self, task_id: str) -> Iterator[trio.CancelScope]:
        """Run the block as ``task_id``'s turn; :meth:`interrupt` cancels it.

        Raises:
            RuntimeError: ``task_id`` already has a running turn (a caller bug).
        """
        if task_id in self._scopes:
            raise RuntimeError(f"task {task_id} already has a running turn")
        with trio.CancelScope() as scope:
            self._scopes[task_id] = scope
            try:
                yield scope
            finally:
                del self._scopes[task_id]

    def interrupt(self, task_id: str) -> bool:
        """Cancel ``task_id``'s running turn; ``False`` if none runs (synchronous)."""
        scope = self._scopes.get(task_id)
        if scope is None:
            return False
        scope.cancel()
        return True
