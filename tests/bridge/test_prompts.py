"""A caller text full of instructions and fake untrusted-content markers never appears
in any prompt, for every runtime: the plane wakes each agent with the body-free wake
prompt, and the caller's text reaches it only inside a tool result's markers."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from taskplane.app import PlaneOptions, open_plane
from taskplane.bridge.manifest import parse_manifest
from taskplane.bridge.python_runtime import TurnTools
from taskplane.bridge.runtime import AgentRuntime, session_id, wake_prompt
from taskplane.bridge.settings import AgentSettings, open_runtime
from taskplane.bridge.tool_api import TaskTools
from taskplane.bridge.tools import UNTRUSTED_BEGIN, UNTRUSTED_END
from taskplane.model.types import Message, Part
from tests.bridge._support import INJECTION, MISBEHAVING_AGENT
from tests.bridge.fake_openai import FakeOpenAI
from tests.support.plane import MANIFEST, auth, make_app

FRAGMENTS = INJECTION.splitlines()
READS: list[str] = []
"""What the ``python`` test agent read (the tool result text)."""


async def python_agent(prompt: str, tools: TurnTools) -> None:
    READS.append((await tools.read()).text)
    await tools.complete("ok")


class Recording:
    """Wraps a runtime; records every prompt the wake queue gives it."""

    def __init__(self, inner: AgentRuntime) -> None:
        self.inner = inner
        self.prompts: list[tuple[str, str]] = []

    def triage(self, message: Message) -> Sequence[Part] | None:
        return self.inner.triage(message)

    async def run_turn(self, task_id: str, prompt: str, tools: TaskTools) -> None:
        self.prompts.append((task_id, prompt))
        await self.inner.run_turn(task_id, prompt, tools)  # type: ignore[arg-type]

    async def release(self, task_id: str) -> None:
        await self.inner.release(task_id)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _assert_quoted(text: str) -> None:
    """Every fragment is inside the one pair of real markers, as ``| `` data lines."""
    lines = text.splitlines()
    assert lines.count(UNTRUSTED_BEGIN) == 1 and lines.count(UNTRUSTED_END) == 1
    begin, end = lines.index(UNTRUSTED_BEGIN), lines.index(UNTRUSTED_END)
    for fragment in FRAGMENTS:
        assert f"| {fragment}" in lines[begin + 1 : end]
        assert not any(fragment in line for line in lines[:begin] + lines[end + 1 :])


@pytest.mark.parametrize("runtime", ["scripted", "openai", "subprocess", "python"])
async def test_caller_text_never_appears_in_any_prompt(
    runtime: str, tmp_path: Path, fake_openai: tuple[FakeOpenAI, str]
) -> None:
    model, url = fake_openai
    settings = AgentSettings(
        runtime=runtime,
        model="fake-model",
        base_url=url,
        api_key="sk-test",
        command=MISBEHAVING_AGENT,
        callable=f"{__name__}:python_agent",
    )
    READS.clear()
    root = tmp_path / "store"

    async with open_runtime(settings, root) as inner:
        recording = Recording(inner)
        async with open_plane(
            root,
            public_url="http://127.0.0.1:8788",
            outputs=parse_manifest(MANIFEST, None, where="tests"),
            options=PlaneOptions(runtime=recording),  # type: ignore[arg-type]
        ) as plane:
            transport = httpx.ASGITransport(app=make_app(plane))
            async with httpx.AsyncClient(
                transport=transport, base_url="http://t", headers=auth()
            ) as client:
                body = {
                    "message": {
                        "messageId": f"inject-{runtime}",
                        "role": "ROLE_USER",
                        "parts": [{"text": INJECTION}],
                    }
                }
                response = await client.post("/message:send", json=body)
                assert response.status_code == 200, response.text
                task = response.json()["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
    assert recording.prompts == [(task["id"], wake_prompt(task["id"]))]
    assert not any(f in wake_prompt(task["id"]) for f in FRAGMENTS)

    if runtime == "openai":
        for request in model.requests:
            for message in request["messages"]:
                content = message.get("content") or ""
                if message["role"] == "tool" and "Ignore all previous" in content:
                    _assert_quoted(content)
                elif message["role"] != "assistant":
                    assert not any(f in content for f in FRAGMENTS), message
    elif runtime == "subprocess":
        received = root / "agent-sessions" / session_id(task["id"]) / "received.jsonl"
        turn: dict[str, Any] = json.loads(received.read_text().splitlines()[0])
        assert turn["params"]["prompt"] == wake_prompt(task["id"])
        assert not any(f in json.dumps(turn) for f in FRAGMENTS)
    elif runtime == "python":
        (read,) = READS
        _assert_quoted(read)
