"""The ``turn_left_for_replay`` line says what becomes of a turn cut off at
shutdown: replayed at the next start on SQLite, taken over after its lease on a
shared (PostgreSQL) store (design rule "Shutdown gives the running turn a deadline;
what it does not finish is replayed")."""

from __future__ import annotations

import pytest

from taskplane.observability import PlaneObserver
from taskplane.shutdown import finish_turn


class _StuckRuntime:
    """A runtime whose running turn never finishes in time."""

    async def drain(self, deadline_s: float) -> bool:
        return False


@pytest.mark.parametrize(
    ("shared_store", "says"),
    [
        (False, "its wake will be replayed at the next start"),
        (True, "another node (or this one, restarted) takes its wake over once its lease"),
    ],
)
async def test_a_turn_left_at_shutdown_is_said_to_be_replayed_or_taken_over(
    caplog: pytest.LogCaptureFixture, shared_store: bool, says: str
) -> None:
    observer = PlaneObserver(runtime=_StuckRuntime())  # type: ignore[arg-type]
    await finish_turn(observer, shared_store=shared_store)
    [line] = [r for r in caplog.records if getattr(r, "event", "") == "turn_left_for_replay"]
    assert says in line.getMessage()
