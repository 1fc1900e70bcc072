"""The turn deadline reaches the agent program: a ``subprocess`` turn that is never
answered is cancelled at ``A2A_TURN_TIMEOUT_MS`` by the wake actor, the program is
sent ``cancel`` for it, and the turn counts as failed (retried). Real time, a real
program (the misbehaving example agent's ``hang``) behind a real plane."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from taskplane.app import PlaneOptions
from taskplane.bridge.runtime import session_id
from taskplane.bridge.settings import AgentSettings
from taskplane.bridge.subprocess_runtime import SubprocessRuntime
from tests.bridge._support import MISBEHAVING_AGENT
from tests.support.plane import open_test_plane
from tests.support.virtual import send, task_id_of

pytestmark = pytest.mark.slow  # real agent programs (tests.support.tiers)

DEADLINE_MS = 300
WAIT_S = 20.0


async def test_a_hung_subprocess_turn_is_cancelled_at_the_deadline_and_told(
    store_root: Path, tmp_path: Path
) -> None:
    runtime = SubprocessRuntime(MISBEHAVING_AGENT, tmp_path)
    settings = AgentSettings(turn_timeout_ms=DEADLINE_MS)
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.serve)
        async with open_test_plane(store_root, PlaneOptions(runtime=runtime), settings) as plane:
            task_id = task_id_of(await send(plane, "hang", "m-hang"))
            received = tmp_path / "agent-sessions" / session_id(task_id) / "received.jsonl"

            def methods() -> list[str]:
                if not received.exists():
                    return []
                return [json.loads(line)["method"] for line in received.read_text().splitlines()]

            # Polls a file the agent program writes (another process: no event to wait on).
            with trio.fail_after(WAIT_S):
                while True:
                    if methods()[:4] == ["turn", "cancel", "turn", "cancel"]:
                        break
                    await trio.sleep(0.05)
            assert plane.wake.statistics().timeouts >= 2
            assert plane.wake.statistics().turn_failures >= 2
        nursery.cancel_scope.cancel()
