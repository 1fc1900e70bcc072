"""The channel tools in process: a native Task's turn is offered ``channel_read`` and
``channel_publish`` (an A2A Task's is not), reads the exact item, and publishes once
per operation ID through the per-delivery serializer, in virtual time."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from taskplane.actors.native import Recovery
from taskplane.actors.outbound import ProviderRejected
from taskplane.actors.toolbox import TaskToolbox
from taskplane.app import PlaneOptions, open_plane
from taskplane.bridge.manifest import parse_manifest
from taskplane.errors import ToolError
from taskplane.model.enums import Role
from taskplane.model.types import Message, Part
from taskplane.scope import Scope
from taskplane.sources.base import Event, Result, Sender, SourceContext
from taskplane.sources.identity import source_identifier
from taskplane.sources.registry import SourcePlan
from tests.support.agent import Agent, Turn
from tests.support.plane import MANIFEST, PUBLIC_URL

EPOCH_MS = 1_800_000_000_000
PRINCIPAL = source_identifier("agent", "a")


def now_ms() -> int:
    return EPOCH_MS + round(trio.current_time() * 1000)


@attrs.define(eq=False)
class Forum:
    """A source with one event; its sender records what it posts (and can refuse)."""

    name: str = "forum"
    recovery: Recovery = "idempotent"
    supports_anchors: bool = False
    sent: list[tuple[str, str, str]] = attrs.field(factory=list)
    refuse: int = 0

    async def run(
        self, ctx: SourceContext, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started()
        await ctx.ingest(
            Event(
                principal=PRINCIPAL,
                identity=("post-1",),
                conversation=("topic-7",),
                parts=(Part(text="please look at topic 7"),),
                locator={"topicId": "topic-7", "postId": "post-1"},
            )
        )
        await trio.sleep_forever()

    def sender(self, result: Result) -> Sender:
        async def send() -> str:
            if self.refuse:
                self.refuse -= 1
                raise ProviderRejected("HTTP 503")
            self.sent.append((result.locator["postId"], result.delivery.operation_id, result.text))
            return f"post-{100 + len(self.sent)}"

        return Sender(send=send)


async def _try(notes: dict[str, Any], key: str, call: Any) -> None:
    try:
        notes[key] = await call
    except ToolError as exc:
        notes[key] = exc


async def script(agent: Agent, turn: Turn) -> None:
    tools, task_id, notes = turn.tools, turn.task_id, turn.notes
    notes["offered"] = tools.channel_tools
    if not tools.channel_tools:
        await _try(notes, "read", tools.channel_read(task_id))
        await tools.a2a_complete_task(task_id, "a2a done")
        return
    notes["read"] = await tools.channel_read(task_id)
    await _try(notes, "refused", tools.channel_publish(task_id, "progress-1", "working on it"))
    notes["first"] = await tools.channel_publish(task_id, "progress-1", "working on it")
    notes["again"] = await tools.channel_publish(task_id, "progress-1", "working on it")
    await _try(notes, "conflict", tools.channel_publish(task_id, "progress-1", "other text"))
    await _try(notes, "bad", tools.channel_publish(task_id, "not an id", "x"))
    await tools.a2a_complete_task(task_id, "done")


async def test_a_native_turn_reads_its_item_and_publishes_once_per_operation(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    forum = Forum(refuse=1)
    agent = Agent(script)
    async with open_plane(
        store_root,
        public_url=PUBLIC_URL,
        outputs=parse_manifest(MANIFEST, None, where="tests"),
        options=PlaneOptions(now_ms=now_ms, store_in_thread=False, runtime=agent),
        sources=SourcePlan((forum,)),
    ) as plane:
        await trio.sleep(30)
        scope = Scope("a-tenant", "alpha")
        message = Message(message_id="m-a2a", role=Role.ROLE_USER, parts=(Part(text="hi"),))
        await plane.send(scope, message, ())
        await trio.sleep(30)
    native, a2a = agent.turns
    notes = native.notes
    assert notes["offered"] is True and a2a.notes["offered"] is False
    assert isinstance(a2a.notes["read"], ToolError) and "not a native task" in str(
        a2a.notes["read"]
    )
    read = notes["read"]
    assert read.details == {
        "source": "forum",
        "locator": {"topicId": "topic-7", "postId": "post-1"},
    }
    assert "please look at topic 7" in read.text and "UNTRUSTED" in read.text
    assert "call again with the same operationId" in str(notes["refused"])
    assert notes["first"].details == notes["again"].details  # one delivery
    assert notes["first"].details["providerResponseId"] == "post-101"
    assert "already published with other text" in str(notes["conflict"])
    assert "operationId must match" in str(notes["bad"])
    assert forum.sent == [
        ("post-1", "publish:progress-1", "working on it"),
        ("post-1", next(op for _, op, text in forum.sent if text == "done"), "done"),
    ]
    with sqlite3.connect(store_root / "taskplane.sqlite3") as conn:
        rows = conn.execute(
            "SELECT operation_id, state FROM deliveries WHERE operation_id LIKE 'publish:%'"
        ).fetchall()
    assert rows == [("publish:progress-1", "delivered")]


async def test_an_a2a_toolbox_refuses_the_channel_tools_before_anything_runs() -> None:
    toolbox = TaskToolbox("t-1", None, None, None)  # type: ignore[arg-type]
    assert toolbox.channel_tools is False
    with pytest.raises(ToolError, match="not a native task"):
        await toolbox.channel_read("t-1")
    with pytest.raises(ToolError, match="not a native task"):
        await toolbox.channel_publish("t-1", "op-1", "text")
