"""Readiness of a real ``taskplane serve`` after one failed Task: unready while the
unhealthy evidence is the newest thing that happened, ready again after the next
successful agent turn (the last recovery), without a restart."""

from __future__ import annotations

import httpx
import pytest

from tests.e2e._support import send_text
from tests.e2e.taskplane_proc import Spawner

pytestmark = pytest.mark.slow


async def test_one_failed_task_makes_the_server_unready_only_until_the_next_successful_turn(
    spawn: Spawner,
) -> None:
    server = spawn.serve()
    failed = await send_text(server, "fail", timeout_s=60)
    assert failed["status"]["state"] == "TASK_STATE_FAILED"
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        unready = await client.get("/readyz")
        assert unready.status_code == 503
        assert any("unhealthy evidence" in r for r in unready.json()["reasons"])
        done = await send_text(server, "hello")
        assert done["status"]["state"] == "TASK_STATE_COMPLETED"
        ready = await client.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json() == {"status": "ready", "reasons": []}
        assert "taskplane_ready 1.0" in (await client.get("/metrics")).text
