"""The A2A 0.3 scenarios, run with the official ``a2a-sdk`` 0.3.x client (unmodified) in
its own virtual environment, against ``taskplane serve`` with ``TASKPLANE_A2A_COMPAT=0.3``.

Usage: ``python scenarios.py BASE_URL TOKEN [TRANSPORT]`` (``JSONRPC``, the default, or
``HTTP+JSON``: the client's only supported transport). Prints one JSON line per scenario,
``{"scenario", "ok", "error"?}``, and exits 1 if one failed. Run by
``tests/e2e/test_a2a_sdk03_client.py``; this file imports only the 0.3 SDK and httpx.
"""

from __future__ import annotations

import asyncio
import json
import sys
import traceback
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.errors import A2AClientHTTPError, A2AClientJSONRPCError
from a2a.types import (
    AgentCard,
    Message,
    Part,
    Role,
    Task,
    TaskIdParams,
    TaskQueryParams,
    TaskState,
    TaskStatusUpdateEvent,
    TextPart,
)

TERMINAL = {TaskState.completed, TaskState.canceled, TaskState.failed, TaskState.rejected}


def message(text: str, **fields: Any) -> Message:
    return Message(
        message_id=f"e2e03-{uuid.uuid4()}",
        role=Role.user,
        parts=[Part(root=TextPart(text=text))],
        **fields,
    )


def texts(task: Task) -> list[str]:
    return [
        part.root.text
        for artifact in task.artifacts or []
        for part in artifact.parts
        if isinstance(part.root, TextPart)
    ]


async def collect(stream: AsyncIterator[Any]) -> list[Any]:
    return [event async for event in stream]


class Scenarios:
    def __init__(self, http: httpx.AsyncClient, base_url: str, transport: str) -> None:
        self.http = http
        self.base_url = base_url
        self.transport = transport
        self.card: AgentCard | None = None

    def client(self, *, streaming: bool = False, polling: bool = False) -> Any:
        assert self.card is not None
        config = ClientConfig(
            httpx_client=self.http,
            streaming=streaming,
            polling=polling,
            supported_transports=[self.transport],
        )
        return ClientFactory(config).create(self.card)

    async def refused(self, call: Awaitable[Any], code: int, status: int) -> None:
        """``call`` fails: with the JSON-RPC ``code``, or the HTTP+JSON ``status``."""
        try:
            await call
        except A2AClientJSONRPCError as exc:
            assert self.transport == "JSONRPC" and exc.error.code == code, exc.error
        except A2AClientHTTPError as exc:
            assert self.transport == "HTTP+JSON" and exc.status_code == status, exc
        else:
            raise AssertionError("the call succeeded")

    async def send_for_task(self, text: str, *, polling: bool = False, **fields: Any) -> Task:
        events = await collect(self.client(polling=polling).send_message(message(text, **fields)))
        assert len(events) == 1, events
        task, update = events[0]
        assert isinstance(task, Task) and update is None, events[0]
        return task

    async def card_fetch(self) -> None:
        card = await A2ACardResolver(self.http, self.base_url).get_agent_card()
        assert card.protocol_version == "0.3.0", card.protocol_version
        assert card.preferred_transport == "JSONRPC", card.preferred_transport
        assert card.url.rstrip("/") == self.base_url.rstrip("/"), card.url
        assert card.capabilities.streaming is True
        assert card.security == [{"bearer": []}], card.security
        transports = [i.transport for i in card.additional_interfaces or []]
        assert transports == ["JSONRPC", "HTTP+JSON"], transports
        self.card = card

    async def blocking_send(self) -> None:
        task = await self.send_for_task("hello from 0.3")
        assert task.kind == "task"
        assert task.status.state == TaskState.completed, task.status.state
        assert texts(task) == ["hello from 0.3"], texts(task)
        assert task.history and task.history[0].role == Role.user

    async def direct_reply(self) -> None:
        events = await collect(self.client().send_message(message("ping")))
        assert len(events) == 1 and isinstance(events[0], Message), events
        assert events[0].role == Role.agent
        assert [p.root.text for p in events[0].parts if isinstance(p.root, TextPart)] == ["pong"]

    async def non_blocking_send(self) -> None:
        task = await self.send_for_task("sleep: 500", polling=True)
        assert task.status.state in (TaskState.submitted, TaskState.working), task.status.state
        done = await self.poll(task.id)
        assert done.status.state == TaskState.completed, done.status.state
        assert texts(done) == ["Slept 500 ms."], texts(done)

    async def stream(self) -> None:
        events = await collect(self.client(streaming=True).send_message(message("sleep: 200")))
        tasks = [task for task, _ in events]
        assert all(t.id == tasks[0].id for t in tasks), tasks
        updates = [u for _, u in events if isinstance(u, TaskStatusUpdateEvent)]
        assert updates and updates[-1].final is True, updates
        assert updates[-1].status.state == TaskState.completed
        assert texts(tasks[-1]) == ["Slept 200 ms."], texts(tasks[-1])

    async def get(self) -> None:
        client = self.client()
        task = await self.send_for_task("for get")
        got = await client.get_task(TaskQueryParams(id=task.id, history_length=1))
        assert got.id == task.id and got.status.state == TaskState.completed
        assert got.history is not None and len(got.history) == 1, got.history
        await self.refused(
            client.get_task(TaskQueryParams(id=f"no-such-{uuid.uuid4()}")), -32001, 404
        )

    async def cancel(self) -> None:
        client = self.client()
        task = await self.send_for_task("sleep: 10000", polling=True)
        canceled = await client.cancel_task(TaskIdParams(id=task.id))
        assert canceled.status.state == TaskState.canceled, canceled.status.state
        await self.refused(client.cancel_task(TaskIdParams(id=task.id)), -32002, 400)

    async def resubscribe(self) -> None:
        task = await self.send_for_task("sleep: 800", polling=True)
        events = await collect(self.client(streaming=True).resubscribe(TaskIdParams(id=task.id)))
        assert events, events
        last, _ = events[-1]
        assert last.id == task.id and last.status.state == TaskState.completed, last.status

    async def input_required_then_answer(self) -> None:
        asked = await self.send_for_task("ask: which colour?")
        assert asked.status.state == TaskState.input_required, asked.status.state
        assert asked.status.message is not None and asked.status.message.role == Role.agent
        answered = await self.send_for_task("blue", task_id=asked.id, context_id=asked.context_id)
        assert answered.id == asked.id
        assert answered.status.state == TaskState.completed, answered.status.state

    async def poll(self, task_id: str) -> Task:
        client = self.client()
        for _ in range(200):
            task = await client.get_task(TaskQueryParams(id=task_id))
            if task.status.state in TERMINAL:
                return task
            await asyncio.sleep(0.05)
        raise AssertionError(f"task {task_id} did not finish")


async def main(base_url: str, token: str, transport: str) -> int:
    headers = {"Authorization": f"Bearer {token}"}
    failed = 0
    async with httpx.AsyncClient(headers=headers, timeout=30.0) as http:
        scenarios = Scenarios(http, base_url, transport)
        steps: list[tuple[str, Callable[[], Awaitable[None]]]] = [
            ("card_fetch", scenarios.card_fetch),
            ("blocking_send", scenarios.blocking_send),
            ("direct_reply", scenarios.direct_reply),
            ("non_blocking_send", scenarios.non_blocking_send),
            ("stream", scenarios.stream),
            ("get", scenarios.get),
            ("cancel", scenarios.cancel),
            ("resubscribe", scenarios.resubscribe),
            ("input_required_then_answer", scenarios.input_required_then_answer),
        ]
        for name, step in steps:
            try:
                await step()
            except Exception as exc:  # one line per scenario, whatever failed
                failed += 1
                error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}"
                print(json.dumps({"scenario": name, "ok": False, "error": error}), flush=True)
            else:
                print(json.dumps({"scenario": name, "ok": True}), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    transport = sys.argv[3] if len(sys.argv) > 3 else "JSONRPC"
    sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2], transport)))
