"""A session keeps its whole model profile: the model, the system prompt and the
reasoning effort ("thinking level"), sent with every call and kept across a restart
(the scripted OpenAI-compatible server in process, through an ASGI transport)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx2
import openai
import trio

from taskplane.bridge.openai_runtime import OpenAIRuntime
from taskplane.bridge.runtime import session_id, wake_prompt
from taskplane.bridge.sessions import FileTranscriptStore, Profile
from tests.bridge._support import FakeTools, task_with
from tests.bridge.fake_openai import FakeOpenAI


def _runtime(fake: FakeOpenAI, root: Path, profile: Profile) -> OpenAIRuntime:
    http = openai.DefaultAsyncHttpxClient(transport=httpx2.ASGITransport(app=fake))
    client = openai.AsyncOpenAI(api_key="k", base_url="http://fake/v1", http_client=http)
    return OpenAIRuntime(client, profile, FileTranscriptStore(root))


async def test_the_reasoning_effort_is_sent_and_kept_with_the_session(tmp_path: Path) -> None:
    fake = FakeOpenAI()
    first = _runtime(fake, tmp_path, Profile("model-a", "prompt A", "high"))
    with trio.fail_after(10):
        await first.run_turn("t-r", wake_prompt("t-r"), FakeTools(task_with("t-r", "ask: Q?")))
    await first.aclose()
    assert {r["reasoning_effort"] for r in fake.requests} == {"high"}
    stored = json.loads(
        (tmp_path / "agent-sessions" / session_id("t-r") / "transcript.json").read_text()
    )
    assert stored["profile"] == {
        "model": "model-a",
        "systemPrompt": "prompt A",
        "reasoningEffort": "high",
    }
    # Restarted with another profile (no effort): the session keeps its own.
    fake.requests.clear()
    second = _runtime(fake, tmp_path, Profile("model-b", "prompt B"))
    answered = FakeTools(task_with("t-r", "ask: Q?", "Q?", "yes"))
    with trio.fail_after(10):
        await second.run_turn("t-r", wake_prompt("t-r"), answered)
    await second.aclose()
    assert {(r["model"], r["reasoning_effort"]) for r in fake.requests} == {("model-a", "high")}
    # A new session without an effort sends none.
    fake.requests.clear()
    plain = _runtime(fake, tmp_path, Profile("model-b", "prompt B"))
    with trio.fail_after(10):
        await plain.run_turn("t-p", wake_prompt("t-p"), FakeTools(task_with("t-p", "hi")))
    await plain.aclose()
    assert all("reasoning_effort" not in r for r in fake.requests)
