"""Readiness tells the truth about the store (design rule "Readiness tells the truth").

A store that cannot commit (a full disk: SQLite's SQLITE_FULL, made real by capping the
database's size with ``PRAGMA max_page_count`` through the connection class the plane
opens, see ``tests/store/faults.py``) makes ``/readyz`` answer 503 with the reason and
``taskplane_ready`` read 0, until a commit succeeds again; a blocking send whose Task
cannot be recorded answers 503 at once instead of at the blocking timeout. Virtual
time, SQLite on the trio thread, the app in-process.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio
import trio.testing

from taskplane.actors.plane import TaskPlane
from taskplane.http.card import agent_card_json
from taskplane.http.handlers import Handlers
from taskplane.observability import PlaneObserver
from taskplane.server import edge_app
from tests.store.faults import DiskQuota, quota_connection
from tests.support.agent import Agent, Turn
from tests.support.plane import (
    PUBLIC_URL,
    credentials,
    in_process_client,
    open_test_plane,
    send_body,
)
from tests.support.virtual import options, quiesce

BLOCKING_TIMEOUT_S = 60.0
BIG = "x" * 30_000
"""A message text big enough that recording it needs new database pages."""


@attrs.define
class Served:
    plane: TaskPlane
    agent: Agent
    quota: DiskQuota
    client: httpx.AsyncClient


@asynccontextmanager
async def served(store_root: Path, agent: Agent | None = None) -> AsyncIterator[Served]:
    """A plane whose disk the test fills, with its app reading the plane's health."""
    agent = agent or Agent()
    quota, observer = DiskQuota(), PlaneObserver()
    plane_options = options(agent, connection_factory=quota_connection(quota), observer=observer)
    async with open_test_plane(store_root, plane_options) as plane:
        card = agent_card_json(public_url=PUBLIC_URL, name="t", description="t", version="1")
        app = edge_app(
            Handlers(plane, blocking_timeout_s=BLOCKING_TIMEOUT_S, metrics=observer.metrics),
            credentials(),
            card,
            supported_extensions=(),
            statistics=partial(observer.statistics, plane),
        )
        async with in_process_client(app) as client:
            yield Served(plane, agent, quota, client)


async def readiness(client: httpx.AsyncClient) -> tuple[int, list[str], str]:
    """``/readyz``'s status and reasons, and the ``taskplane_ready`` line of ``/metrics``
    (whose ``taskplane_store_commit_failing`` must say the same)."""
    ready = await client.get("/readyz")
    metrics = (await client.get("/metrics")).text
    line = next(x for x in metrics.splitlines() if x.startswith("taskplane_ready "))
    failing = next(
        x for x in metrics.splitlines() if x.startswith("taskplane_store_commit_failing ")
    )
    body: dict[str, Any] = ready.json()
    commit_reason = any("cannot commit" in r for r in body["reasons"])
    assert failing == f"taskplane_store_commit_failing {float(commit_reason)}"
    return ready.status_code, body["reasons"], line


async def test_a_full_disk_makes_the_server_unready_until_a_commit_succeeds_again(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with served(store_root) as s:
        await quiesce()
        assert await readiness(s.client) == (200, [], "taskplane_ready 1.0")

        s.quota.fill()
        refused = await s.client.post(
            "/message:send",
            json=send_body(BIG, "m-full", configuration={"returnImmediately": True}),
        )
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["status"] == "UNAVAILABLE"
        assert "nothing was recorded" in refused.json()["error"]["message"]
        status, reasons, line = await readiness(s.client)
        assert (status, line) == (503, "taskplane_ready 0.0")
        assert any(
            "cannot commit" in r and "is full" in r and "database or disk is full" in r
            for r in reasons
        ), reasons
        # still full: a reading's probe fails too, readiness stays 503
        assert (await readiness(s.client))[0] == 503

        s.quota.free()  # space is back; no client writes: the reading's probe commits
        assert await readiness(s.client) == (200, [], "taskplane_ready 1.0")
        accepted = await s.client.post("/message:send", json=send_body(BIG, "m-again"))
        assert accepted.status_code == 200, accepted.text


async def test_a_blocking_send_whose_task_cannot_be_recorded_answers_503_at_once(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async def answer_big(agent: Agent, turn: Turn) -> None:
        await agent.gate("go").wait()
        await turn.tools.a2a_complete_task(turn.task_id, BIG)  # needs new pages

    async with served(store_root, Agent(answer_big)) as s:
        answers: list[tuple[httpx.Response, float]] = []

        async def blocking_send() -> None:
            response = await s.client.post("/message:send", json=send_body("hello", "m-1"))
            answers.append((response, trio.current_time()))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(blocking_send)
            await s.agent.wait_turns(1)
            await quiesce()
            s.quota.fill()
            opened = trio.current_time()
            s.agent.open("go")
        ((response, answered),) = answers
        assert response.status_code == 503, response.text
        assert response.json()["error"]["status"] == "UNAVAILABLE"
        assert "cannot be recorded" in response.json()["error"]["message"]
        assert answered - opened < 1.0  # at once, not at the 60 s blocking timeout
        s.quota.free()
