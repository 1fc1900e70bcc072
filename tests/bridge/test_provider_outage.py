"""Provider failures are not Task failures: the ``openai`` runtime against the scripted
OpenAI-compatible server served in process (an ASGI transport, so virtual time drives
everything), through the whole plane: a 2-minute 429 storm then recovery completes
every Task with none failed and no delivery counted twice; a provider that never
comes back fails its Task only after ``A2A_AGENT_PROVIDER_PATIENCE_S``."""

from __future__ import annotations

from pathlib import Path

import httpx2
import openai
import pytest
import trio
import trio.testing
from openai._base_client import get_platform

from taskplane.app import PlaneOptions
from taskplane.bridge.agent_process import RESTART_WAIT_S
from taskplane.bridge.openai_runtime import OpenAIRuntime
from taskplane.bridge.runtime import session_id
from taskplane.bridge.sessions import Profile, Transcript
from taskplane.bridge.settings import AgentSettings
from taskplane.bridge.subprocess_runtime import SubprocessRuntime
from taskplane.bridge.tool_api import TurnLease
from taskplane.errors import ProviderUnavailable
from taskplane.http.metrics import Metrics, PlaneStatistics
from taskplane.model.enums import TaskState
from taskplane.scope import Scope
from tests.bridge._support import FakeTools, task_with
from tests.bridge.fake_openai import FakeOpenAI
from tests.support.plane import open_test_plane
from tests.support.virtual import ALICE, journal, quiesce, send, task_id_of, virtual_now_ms

STORM_S = 120.0
TASKS = 8


class MemoryTranscripts:
    """A :class:`TranscriptStore` kept in memory (no worker thread: virtual time stays
    exact)."""

    def __init__(self) -> None:
        self.saved: dict[str, Transcript] = {}

    async def open(self, task_id: str, profile: Profile) -> Transcript:
        kept = self.saved.get(task_id)
        if kept is None:
            return Transcript(session_id(task_id), task_id, profile, [])
        return Transcript(kept.session_id, task_id, kept.profile, list(kept.messages))

    async def refresh(self, transcript: Transcript) -> Transcript:
        return transcript

    async def save(self, transcript: Transcript, fence: TurnLease | None = None) -> None:
        self.saved[transcript.task_id] = Transcript(
            transcript.session_id, transcript.task_id, transcript.profile, list(transcript.messages)
        )


def _runtime(fake: FakeOpenAI) -> OpenAIRuntime:
    http = openai.DefaultAsyncHttpxClient(transport=httpx2.ASGITransport(app=fake))
    client = openai.AsyncOpenAI(
        api_key="sk-test", base_url="http://fake/v1", max_retries=0, http_client=http
    )
    # The client otherwise computes this in a worker thread on its first request,
    # which the MockClock would take for idle time (and jump to the next deadline).
    client._platform = get_platform()
    return OpenAIRuntime(client, Profile("m", "SYS"), MemoryTranscripts())


def _options(runtime: OpenAIRuntime) -> PlaneOptions:
    return PlaneOptions(runtime=runtime, now_ms=virtual_now_ms, store_in_thread=False)


async def test_a_429_is_provider_unavailable_with_its_retry_after(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeOpenAI()
    fake.storm_until, fake.retry_after = trio.current_time() + 1, "7"
    runtime = _runtime(fake)
    with pytest.raises(ProviderUnavailable, match="HTTP 429") as caught:
        await runtime.run_turn("t-429", "wake", FakeTools(task_with("t-429", "hi")))
    await runtime.aclose()
    assert caught.value.retry_after_s == 7


async def test_a_429_storm_then_recovery_completes_every_task_with_none_failed(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    fake = FakeOpenAI()
    fake.retry_after = "5"
    runtime = _runtime(fake)
    agent = AgentSettings(concurrency=4)
    async with open_test_plane(store_root, _options(runtime), agent) as plane:
        started = trio.current_time()
        fake.storm_until = started + STORM_S
        ids = [task_id_of(await send(plane, f"text {i}", f"m-{i}")) for i in range(TASKS)]
        await quiesce(30)
        during = plane.wake.statistics()
        assert during.provider_unavailable == TASKS
        reasons = PlaneStatistics(
            store_open=True, actors_running=True, agent_provider_unavailable=TASKS
        ).not_ready_reasons()
        assert reasons == [
            f"agent provider unavailable: {TASKS} task(s) wait for it and resume by themselves"
        ]
        scraped = Metrics().render(PlaneStatistics(agent_provider_unavailable=TASKS)).decode()
        assert f"taskplane_agent_provider_unavailable {TASKS}.0" in scraped
        finished: dict[str, float] = {}
        with trio.fail_after(3600):
            for task_id in ids:
                task = await plane.wait_settled(plane_scope(), task_id, 0)
                finished[task_id] = trio.current_time() - started
                assert task.status.state is TaskState.TASK_STATE_COMPLETED, task.status
        rows = await journal(plane)
        after = plane.wake.statistics()
    assert [k for k, _, _ in rows].count("WAKE_FAILED") == 0
    deliveries = {r["delivery"] for k, _, r in rows if k == "WAKE_DELIVERED"}
    assert deliveries == {1}  # provider failures never used up the delivery cap
    assert after.provider_unavailable == 0 and after.turn_failures == 0
    last = max(finished.values())
    assert STORM_S <= last <= STORM_S + 300  # resumed by themselves, within one cap
    print(
        f"429 storm {STORM_S:.0f} s (virtual): {fake.refused} refused calls, "
        f"{TASKS} Tasks completed {min(finished.values()):.1f}..{last:.1f} s after the "
        "storm began, none failed"
    )


async def test_a_provider_that_stays_down_fails_the_task_after_the_patience(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    fake = FakeOpenAI()
    fake.storm_until = float("inf")
    runtime = _runtime(fake)
    agent = AgentSettings(provider_patience_s=600, provider_backoff_cap_s=60)
    async with open_test_plane(store_root, _options(runtime), agent) as plane:
        started = trio.current_time()
        task_id = task_id_of(await send(plane, "hello", "m-down"))
        with trio.fail_after(3600):
            failed = await plane.wait_settled(plane_scope(), task_id, 0)
        elapsed = trio.current_time() - started
        rows = await journal(plane, task_id=task_id)
    assert failed.status.state is TaskState.TASK_STATE_FAILED
    assert failed.status.message is not None
    assert "provider stayed unavailable" in (failed.status.message.parts[0].text or "")
    assert 600 <= elapsed < 601
    failed_rows = [r for k, _, r in rows if k == "WAKE_FAILED"]
    assert [r["error"] for r in failed_rows] == ["the agent's provider stayed unavailable"]
    # 1 s, 2 s, 4 s ... 60 s, 60 s ...: a bounded number of calls over 10 minutes.
    assert fake.refused < 20


def plane_scope() -> Scope:
    return ALICE


async def test_a_subprocess_program_still_restarting_is_provider_unavailable(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    runtime = SubprocessRuntime(("/never/started",), tmp_path)  # serve() is not running
    started = trio.current_time()
    with pytest.raises(ProviderUnavailable, match="restarting"):
        await runtime.run_turn("t-sub", "wake", FakeTools(task_with("t-sub", "hi")))
    assert trio.current_time() - started == pytest.approx(RESTART_WAIT_S)
