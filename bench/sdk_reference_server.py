"""The a2a-sdk reference REST server with an echo agent, for ``bench/compare.py``.

Not part of taskplane: it wires the official SDK's ``DefaultRequestHandler`` to an
``InMemoryTaskStore`` (``--store memory``) or to its SQLite ``DatabaseTaskStore``
(``--store sqlite``, through SQLAlchemy + aiosqlite), serves the HTTP+JSON routes
(``create_rest_routes``) and the Agent Card with uvicorn on 127.0.0.1, and runs an
echo executor: each message becomes a Task (SUBMITTED), gets one artifact holding the
user's text, and is COMPLETED, which is what taskplane's scripted agent does with
``hello``.

``--seed N`` stores N COMPLETED Tasks directly through the store before serving (the
list workload); their IDs are not printed. Needs ``pip install -e ".[bench]"``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

import uvicorn
from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_rest_routes
from a2a.server.tasks import InMemoryTaskStore, TaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Message,
    Part,
    Role,
    Task,
    TaskState,
    TaskStatus,
)
from starlette.applications import Starlette


class EchoExecutor(AgentExecutor):
    """Echo the user's text into one artifact, then complete the Task."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is None:
            assert context.message is not None
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        await updater.add_artifact([new_text_part(context.get_user_input())], name="response")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None and context.context_id is not None
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def agent_card(port: int) -> AgentCard:
    return AgentCard(
        name="sdk-echo",
        description="a2a-sdk reference REST server with an echo executor (benchmark)",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(
                url=f"http://127.0.0.1:{port}",
                protocol_binding="HTTP+JSON",
                protocol_version="1.0",
            )
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="echoes", tags=["echo"])],
    )


async def make_store(kind: str, db: str | None) -> TaskStore:
    if kind == "memory":
        return InMemoryTaskStore()
    from a2a.server.tasks import DatabaseTaskStore
    from sqlalchemy.ext.asyncio import create_async_engine

    assert db is not None, "--db is required with --store sqlite"
    store = DatabaseTaskStore(create_async_engine(f"sqlite+aiosqlite:///{db}"))
    await store.initialize()
    return store


def _seed_task(i: int) -> Task:
    message = Message(
        message_id=f"seed-{i}",
        role=Role.ROLE_USER,
        parts=[Part(text="hello")],
        context_id=str(uuid.uuid4()),
    )
    task = new_task_from_user_message(message)
    task.status.CopyFrom(TaskStatus(state=TaskState.TASK_STATE_COMPLETED))
    task.status.timestamp.GetCurrentTime()
    return task


async def seed(store: TaskStore, count: int) -> None:
    """Store ``count`` COMPLETED Tasks owned by the unauthenticated caller."""
    started = time.monotonic()
    context = ServerCallContext()
    if isinstance(store, InMemoryTaskStore):
        for i in range(count):
            await store.save(_seed_task(i), context)
    else:  # one transaction for all rows (store.save would commit each)
        owner = store.owner_resolver(context)  # type: ignore[attr-defined]
        async with store.async_session_maker.begin() as session:  # type: ignore[attr-defined]
            for i in range(count):
                session.add(store._to_orm(_seed_task(i), owner))  # type: ignore[attr-defined]
    print(f"seeded {count} tasks in {time.monotonic() - started:.1f}s", flush=True)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--store", choices=("memory", "sqlite"), default="memory")
    parser.add_argument("--db", help="SQLite file (with --store sqlite)")
    parser.add_argument("--seed", type=int, default=0, help="COMPLETED Tasks to store first")
    args = parser.parse_args()
    store = await make_store(args.store, args.db)
    if args.seed:
        await seed(store, args.seed)
    card = agent_card(args.port)
    handler = DefaultRequestHandler(
        agent_executor=EchoExecutor(), task_store=store, agent_card=card
    )
    app = Starlette(routes=[*create_agent_card_routes(card), *create_rest_routes(handler)])
    config = uvicorn.Config(
        app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False
    )
    await uvicorn.Server(config).serve()


if __name__ == "__main__":
    asyncio.run(main())
