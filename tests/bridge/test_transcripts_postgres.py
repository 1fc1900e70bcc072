"""The openai runtime's transcripts on a PostgreSQL store: one row per Task session,
read by any node, saved by version compare-and-swap under the turn's fence (design
rule "Turn authority is a lease"), pruned with the Task by compaction; and the
warning a node gives when its runtime's session directories stay on that node.

Two "nodes" are two stores (each its own sessions and store actor) on one database.
The fence check reads the wake row (``wakes``: activation, epoch, node, state,
lease on database time); :func:`_wake` writes that row as a claim would.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import openai
import psycopg
import pytest
import trio

from taskplane.app import open_plane
from taskplane.bridge.manifest import parse_manifest
from taskplane.bridge.openai_runtime import UNKNOWN_OUTCOME, OpenAIRuntime
from taskplane.bridge.runtime import session_id, wake_prompt
from taskplane.bridge.sessions import FileTranscriptStore, Profile, TranscriptStore
from taskplane.bridge.settings import AgentSettings
from taskplane.cluster.transcripts import SharedTranscriptStore
from taskplane.errors import Fenced, VersionConflict
from taskplane.store.postgres import actor as pg_actor
from taskplane.store.postgres import compaction
from taskplane.store.postgres.database import open_connections
from taskplane.store.postgres.sessions import PgSessionStore
from taskplane.store.records import Fence
from taskplane.store.sqlite.actor import STORE_INBOX_SIZE, StoreRequest
from tests.bridge._support import FakeTools, task_with
from tests.bridge.fake_openai import FakeOpenAI
from tests.store.backends import open_pg_store
from tests.store.contract import LOCATOR, NOW, activation
from tests.support.pg import Cluster
from tests.support.plane import MANIFEST, PUBLIC_URL

TURN_DEADLINE_S = 20.0


def _wake(url: str, activation_id: str, *, epoch: int, node: str, lease_s: float) -> None:
    """Make ``activation_id``'s wake a running claim of ``node`` at ``epoch`` whose
    lease ends ``lease_s`` seconds from now on the database's clock (negative:
    expired)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO wakes (activation_id, task_id, context_id, lane, state, node_id,"
            " epoch, lease_until) VALUES (%s, %s, 'ctx', 'ctx', 'running', %s, %s,"
            " now() + make_interval(secs => %s))"
            " ON CONFLICT (activation_id) DO UPDATE SET state = 'running',"
            " node_id = excluded.node_id, epoch = excluded.epoch,"
            " lease_until = excluded.lease_until",
            (activation_id, "t-" + activation_id, node, epoch, lease_s),
        )


@asynccontextmanager
async def open_node(url: str) -> AsyncIterator[SharedTranscriptStore]:
    """One node's transcript store: its own sessions and store actor on ``url``."""
    sessions = await trio.to_thread.run_sync(open_connections, url, 2)
    tx, rx = trio.open_memory_channel[StoreRequest](STORE_INBOX_SIZE)
    try:
        async with trio.open_nursery() as nursery:
            counters = pg_actor.BatchCounters()
            await nursery.start(partial(pg_actor.run_store, sessions, rx, counters))
            try:
                yield SharedTranscriptStore(PgSessionStore(tx))
            finally:
                nursery.cancel_scope.cancel()
    finally:
        tx.close()
        for session in sessions:
            session.close()


def _stored(url: str, task_id: str) -> tuple[dict[str, str], list[dict[str, object]], int]:
    """The stored row of ``task_id``'s session: (profile, messages, version)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT profile_json, messages_json, version FROM agent_sessions WHERE task_id = %s",
            (task_id,),
        ).fetchone()
    assert row is not None
    return json.loads(row[0]), json.loads(row[1]), int(row[2])


MESSAGES: list[dict[str, object]] = [
    {"role": "user", "content": "wake: naïve café ☕"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call-1",
                "type": "function",
                "function": {"name": "a2a_read_task", "arguments": '{"task_id": "t"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call-1", "content": "line 1\nline 2"},
]


# --- the store: round trip, a second node, the version, the fence -----------------


@pytest.mark.parametrize("kind", ["file", "postgresql"])
async def test_a_transcript_round_trips_with_its_own_profile(
    kind: str, pg_cluster: Cluster, tmp_path: Path
) -> None:
    url = pg_cluster.fresh_store_url()

    @asynccontextmanager
    async def store() -> AsyncIterator[TranscriptStore]:
        if kind == "file":
            yield FileTranscriptStore(tmp_path)
            return
        async with open_node(url) as shared:
            yield shared

    async with store() as first:
        created = await first.open("t-1", Profile("model-a", "prompt A", "low"))
        assert created.messages == [] and created.session_id == session_id("t-1")
        created.messages.extend(MESSAGES)
        await first.save(created)
    async with store() as again:  # a restart: nothing cached
        reopened = await again.open("t-1", Profile("model-b", "prompt B"))
    assert reopened.profile == Profile("model-a", "prompt A", "low")
    assert reopened.messages == MESSAGES
    assert reopened.session_id == session_id("t-1") and reopened.task_id == "t-1"


async def test_a_second_node_reads_what_the_first_saved_and_a_stale_copy_cannot_overwrite(
    pg_cluster: Cluster,
) -> None:
    url = pg_cluster.fresh_store_url()
    async with open_node(url) as node_a, open_node(url) as node_b:
        on_a = await node_a.open("t-2", Profile("m", "SYS"))
        on_a.messages.append({"role": "user", "content": "turn 1"})
        await node_a.save(on_a)
        assert on_a.version == 1

        on_b = await node_b.open("t-2", Profile("other", "OTHER"))
        assert on_b.messages == [{"role": "user", "content": "turn 1"}]
        assert on_b.profile == Profile("m", "SYS") and on_b.version == 1
        on_b.messages.append({"role": "user", "content": "turn 2, on node B"})
        await node_b.save(on_b)

        # A's copy is from before B's turn: a save of it is refused, nothing written ...
        on_a.messages.append({"role": "user", "content": "lost"})
        with pytest.raises(VersionConflict):
            await node_a.save(on_a)
        assert _stored(url, "t-2")[1:] == (on_b.messages, 2)
        # ... and a refresh of it brings B's turn; a current copy is kept as it is.
        fresh = await node_a.refresh(on_a)
        assert fresh.messages == on_b.messages and fresh.version == 2
        assert await node_a.refresh(fresh) is fresh


async def test_a_save_under_a_stale_fence_is_refused_and_leaves_the_old_transcript(
    pg_cluster: Cluster,
) -> None:
    url = pg_cluster.fresh_store_url()
    async with open_node(url) as node_a:
        await trio.to_thread.run_sync(partial(_wake, url, "act-1", epoch=1, node="A", lease_s=15))
        transcript = await node_a.open("t-3", Profile("m", "SYS"))
        transcript.messages.append({"role": "user", "content": "kept"})
        await node_a.save(transcript, Fence("act-1", 1, "A"))
        kept = _stored(url, "t-3")
        assert kept[1:] == ([{"role": "user", "content": "kept"}], 1)

        transcript.messages.append({"role": "user", "content": "never stored"})
        # Another node's fence, and an epoch the wake never had:
        for fence in (Fence("act-1", 1, "B"), Fence("act-1", 2, "A"), Fence("act-9", 1, "A")):
            with pytest.raises(Fenced):
                await node_a.save(transcript, fence)
        # The lease expired on the database's clock:
        await trio.to_thread.run_sync(partial(_wake, url, "act-1", epoch=1, node="A", lease_s=-1))
        with pytest.raises(Fenced):
            await node_a.save(transcript, Fence("act-1", 1, "A"))
        # Reclaimed by node B at epoch 2: A's epoch-1 fence is stale, B's is current.
        await trio.to_thread.run_sync(partial(_wake, url, "act-1", epoch=2, node="B", lease_s=15))
        with pytest.raises(Fenced):
            await node_a.save(transcript, Fence("act-1", 1, "A"))
        assert _stored(url, "t-3") == kept
        await node_a.save(transcript, Fence("act-1", 2, "B"))
        assert _stored(url, "t-3")[2] == 2


async def test_sessions_are_pruned_with_their_task(pg_cluster: Cluster) -> None:
    url = pg_cluster.fresh_store_url()
    async with open_pg_store(url) as store:
        accepted = await store.accept(activation("m-prune"), LOCATOR, NOW)
    assert accepted.stored is not None
    task_id = accepted.stored.task.id
    async with open_node(url) as node:
        for owner in (task_id, "t-gone"):
            transcript = await node.open(owner, Profile("m", "SYS"))
            transcript.messages.append({"role": "user", "content": owner})
            await node.save(transcript)
    with psycopg.connect(url, autocommit=True) as conn:
        compaction.compact(conn, NOW)
        left = conn.execute("SELECT task_id FROM agent_sessions").fetchall()
    assert left == [(task_id,)]


# --- the runtime: the transcript tests of test_openai_runtime, on the database -------


def _runtime(
    url: str, transcripts: TranscriptStore, model: str = "m", prompt: str = "SYS"
) -> OpenAIRuntime:
    client = openai.AsyncOpenAI(
        api_key="sk-test", base_url=url, max_retries=0, http_client=openai.DefaultAsyncHttpxClient()
    )
    return OpenAIRuntime(client, Profile(model, prompt), transcripts)


async def _turn(runtime: OpenAIRuntime, tools: FakeTools) -> None:
    with trio.fail_after(TURN_DEADLINE_S):
        await runtime.run_turn(tools.task.id, wake_prompt(tools.task.id), tools)


async def test_a_continuation_on_another_node_sends_the_whole_conversation(
    fake_openai: tuple[FakeOpenAI, str], pg_cluster: Cluster
) -> None:
    server, base = fake_openai
    url = pg_cluster.fresh_store_url()
    async with open_node(url) as node_a, open_node(url) as node_b:
        first = _runtime(base, node_a, model="model-a", prompt="prompt A")
        await _turn(first, FakeTools(task_with("t-4", "ask: Which branch?")))
        profile, earlier, _ = _stored(url, "t-4")
        assert profile == {"model": "model-a", "systemPrompt": "prompt A"}
        roles = ["user", "assistant", "tool", "assistant", "tool", "assistant"]
        assert [m["role"] for m in earlier] == roles

        # The answer is woken on node B, whose profile differs: the session keeps its own.
        second = _runtime(base, node_b, model="model-b", prompt="prompt B")
        answered = FakeTools(task_with("t-4", "ask: Which branch?", "Which branch?", "main"))
        server.requests.clear()
        await _turn(second, answered)
        await second.aclose()
        assert answered.calls[-1][2]["response"] == "You answered: main"
        request = server.requests[0]
        assert request["model"] == "model-a"
        assert request["messages"][0] == {"role": "system", "content": "prompt A"}
        assert request["messages"][1 : 1 + len(earlier)] == earlier
        after_b = _stored(url, "t-4")[1]

        # Back on node A, whose runtime still holds its copy of turn 1: it sends B's turn.
        server.requests.clear()
        await _turn(first, FakeTools(task_with("t-4", "ask: Which branch?", "again")))
        await first.aclose()
        assert server.requests[0]["messages"][1 : 1 + len(after_b)] == after_b


async def test_a_turn_cancelled_during_a_tool_call_leaves_a_transcript_the_next_turn_can_send(
    fake_openai: tuple[FakeOpenAI, str], pg_cluster: Cluster
) -> None:
    server, base = fake_openai
    url = pg_cluster.fresh_store_url()

    class Stuck(FakeTools):
        async def a2a_complete_task(self, *args: object, **kwargs: object) -> object:
            await trio.sleep_forever()
            raise AssertionError  # unreachable

    async with open_node(url) as node_a, open_node(url) as node_b:
        runtime = _runtime(base, node_a)
        with trio.move_on_after(0.5) as scope:
            await runtime.run_turn("t-5", wake_prompt("t-5"), Stuck(task_with("t-5", "hi")))
        assert scope.cancelled_caught
        await runtime.aclose()
        stored = _stored(url, "t-5")[1]
        last = stored[-1]
        assert isinstance(last, dict)
        [call] = last["tool_calls"]  # type: ignore[misc]
        assert call["function"]["name"] == "a2a_complete_task"

        server.requests.clear()
        elsewhere = _runtime(base, node_b)
        tools = FakeTools(task_with("t-5", "hi"))
        await _turn(elsewhere, tools)
        await elsewhere.aclose()
    sent = server.requests[0]["messages"]
    assert {"role": "tool", "tool_call_id": call["id"], "content": UNKNOWN_OUTCOME} in sent
    assert tools.calls[-1][2]["response"] == "hi"


async def test_a_turn_whose_lease_moved_stops_and_stores_nothing(
    fake_openai: tuple[FakeOpenAI, str], pg_cluster: Cluster
) -> None:
    server, base = fake_openai
    url = pg_cluster.fresh_store_url()
    async with open_node(url) as node_a:
        await trio.to_thread.run_sync(partial(_wake, url, "act-6", epoch=1, node="A", lease_s=15))
        runtime = _runtime(base, node_a)
        current = FakeTools(task_with("t-6", "ask: Which branch?"))
        current.fence = Fence("act-6", 1, "A")
        await _turn(runtime, current)
        kept = _stored(url, "t-6")

        # The wake was reclaimed by node B; A's next turn still carries epoch 1.
        await trio.to_thread.run_sync(partial(_wake, url, "act-6", epoch=2, node="B", lease_s=15))
        server.requests.clear()
        stale = FakeTools(task_with("t-6", "ask: Which branch?", "Which branch?", "main"))
        stale.fence = Fence("act-6", 1, "A")
        with pytest.raises(Fenced):
            await _turn(runtime, stale)
        await runtime.aclose()
    assert _stored(url, "t-6") == kept
    assert not stale.calls  # stopped at its first save, before any tool ran


# --- the composition root ---------------------------------------------------------


@pytest.mark.parametrize("runtime", ["python", "scripted"])
async def test_a_node_local_session_runtime_on_postgresql_is_named_at_start(
    runtime: str, pg_cluster: Cluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "taskplane")
    callable_ = "tests.bridge.test_prompts:python_agent" if runtime == "python" else None
    agent = AgentSettings(runtime=runtime, callable=callable_)
    outputs = parse_manifest(MANIFEST, None, where="tests")
    for store_url in (None, pg_cluster.fresh_store_url()):
        root = tmp_path / ("pg" if store_url else "sqlite")
        async with open_plane(
            root, public_url=PUBLIC_URL, outputs=outputs, agent=agent, store_url=store_url
        ):
            pass
    warned = [r for r in caplog.records if getattr(r, "event", None) == "agent_sessions_node_local"]
    # Only the python runtime on PostgreSQL (SQLite: one process; scripted: no session).
    assert [getattr(r, "runtime", None) for r in warned] == (
        ["python"] if runtime == "python" else []
    )
