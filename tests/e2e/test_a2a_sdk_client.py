"""End to end: the official ``a2a-sdk`` 1.3.0 Python client, unmodified, against the real
``taskplane serve`` process, over both bindings: every test runs with the client's
default configuration (JSON-RPC at ``POST /``) and with HTTP+JSON (REST).

One server process serves the whole module (each test works in its own contexts). The
SDK is asyncio-based, so every test is a plain synchronous test that drives one
``asyncio.run(...)`` bounded by :data:`SCENARIO_DEADLINE_S`.

SDK usage, for reuse:

* card: ``A2ACardResolver(httpx_client, url).get_agent_card()`` (or
  ``ClientFactory(config).create_from_url(url)``);
* client: ``ClientFactory(ClientConfig(httpx_client=..., streaming=...,
  supported_protocol_bindings=[TransportProtocol.HTTP_JSON])).create(card, interceptors)``
  (leave ``supported_protocol_bindings`` out for the default, JSON-RPC).
  ``streaming=False`` sends through ``POST /message:send``; ``streaming=True`` through
  ``POST /message:stream`` (the card declares ``capabilities.streaming``);
* bearer token: ``AuthInterceptor(credential_service)``, which reads the card's
  ``securityRequirements``/``securitySchemes`` (``bearer`` -> HTTP ``Bearer``) and sets
  ``Authorization`` per call; an ``httpx.AsyncClient(headers=...)`` works too;
* operations: ``send_message`` (an async iterator of ``StreamResponse`` in both modes),
  ``get_task``, ``list_tasks``, ``cancel_task``, ``subscribe``;
* errors: the REST transport maps the ``google.rpc.ErrorInfo`` ``reason`` of an error
  body to ``a2a.utils.errors`` classes (``TaskNotCancelableError``, ...), the JSON-RPC
  transport the error object's ``code`` to the same classes.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import aclosing, asynccontextmanager
from typing import Any, TypeVar

import attrs
import httpx
import pytest
from a2a.client import (
    A2ACardResolver,
    A2AClientError,
    AuthInterceptor,
    Client,
    ClientCallContext,
    ClientConfig,
    ClientFactory,
    CredentialService,
)
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskNotCancelableError,
    TaskNotFoundError,
    TaskState,
    UnsupportedOperationError,
)
from a2a.utils.constants import TransportProtocol

from tests.e2e.taskplane_proc import RunningServer, Spawner

pytestmark = pytest.mark.slow

SCENARIO_DEADLINE_S = 45.0
"""Upper bound for one test's asyncio scenario (the longest sleeps 1.5 s)."""
SETTLE_DEADLINE_S = 15.0
"""Upper bound for polling a task into an expected state."""
HTTP_TIMEOUT_S = 30.0

T = TypeVar("T")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """The real server: free port, credentials file, store in a temp dir; always stopped."""
    spawner = Spawner(tmp_path_factory.mktemp("sdk-e2e"))
    try:
        yield spawner.serve(blocking_timeout_ms=20_000)
    finally:
        spawner.close()


BINDINGS = ("JSONRPC", "HTTP+JSON")


@pytest.fixture(params=BINDINGS)
def binding(request: pytest.FixtureRequest) -> str:
    """The binding the SDK clients speak: its default (JSON-RPC), then HTTP+JSON."""
    value: str = request.param
    return value


def run(scenario: Callable[[], Awaitable[T]]) -> T:
    """Run an asyncio scenario to completion within :data:`SCENARIO_DEADLINE_S`."""

    async def bounded() -> T:
        async with asyncio.timeout(SCENARIO_DEADLINE_S):
            return await scenario()

    return asyncio.run(bounded())


class BearerCredentials(CredentialService):
    """The SDK credential service: one token for the card's ``bearer`` scheme."""

    def __init__(self, token: str) -> None:
        self.token = token

    async def get_credentials(
        self, security_scheme_name: str, context: ClientCallContext | None
    ) -> str | None:
        return self.token if security_scheme_name == "bearer" else None


@attrs.frozen
class Sdk:
    """The resolved card and two SDK clients sharing one httpx client."""

    card: AgentCard
    rest: Client
    """``streaming=False``: ``send_message`` uses ``POST /message:send``."""
    streaming: Client
    """``streaming=True``: ``send_message`` uses ``POST /message:stream``."""


@asynccontextmanager
async def sdk(
    server: RunningServer, binding: str, *, authenticated: bool = True
) -> AsyncIterator[Sdk]:
    async with httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as http:
        card = await A2ACardResolver(http, server.url).get_agent_card()
        interceptors = [AuthInterceptor(BearerCredentials(server.token))] if authenticated else []

        def client(streaming: bool) -> Client:
            if binding == TransportProtocol.JSONRPC:  # the SDK's default bindings
                config = ClientConfig(httpx_client=http, streaming=streaming)
            else:
                config = ClientConfig(
                    httpx_client=http,
                    streaming=streaming,
                    supported_protocol_bindings=[TransportProtocol.HTTP_JSON],
                )
            return ClientFactory(config).create(card, interceptors=list(interceptors))

        rest, streaming = client(False), client(True)
        try:
            yield Sdk(card, rest, streaming)
        finally:
            await rest.close()
            await streaming.close()


def user_message(text: str, **fields: Any) -> Message:
    return Message(
        message_id=f"e2e-{uuid.uuid4()}", role=Role.ROLE_USER, parts=[Part(text=text)], **fields
    )


def send_request(
    text: str, *, return_immediately: bool = False, **fields: Any
) -> SendMessageRequest:
    configuration = SendMessageConfiguration(return_immediately=return_immediately)
    return SendMessageRequest(message=user_message(text, **fields), configuration=configuration)


async def collect(stream: AsyncIterator[StreamResponse]) -> list[StreamResponse]:
    """Every frame of an SDK stream, until the server closes it."""
    async with aclosing(stream) as frames:
        return [frame async for frame in frames]


async def only_frame(stream: AsyncIterator[StreamResponse]) -> StreamResponse:
    frames = await collect(stream)
    assert len(frames) == 1, frames
    return frames[0]


async def send_for_task(client: Client, request: SendMessageRequest) -> Task:
    frame = await only_frame(client.send_message(request))
    assert frame.WhichOneof("payload") == "task", frame
    return frame.task


def state_of(frame: StreamResponse) -> int | None:
    kind = frame.WhichOneof("payload")
    if kind == "task":
        return frame.task.status.state
    if kind == "status_update":
        return frame.status_update.status.state
    return None


def artifact_texts(task: Task) -> list[str]:
    return [part.text for artifact in task.artifacts for part in artifact.parts if part.text]


def message_texts(messages: Any) -> list[str]:
    return ["".join(part.text for part in message.parts) for message in messages]


def state_name(state: int | None) -> str:
    return "None" if state is None else TaskState.Name(state)


async def poll_task(client: Client, task_id: str, states: set[int]) -> Task:
    """``get_task`` until the task is in one of ``states`` (bounded)."""
    deadline = time.monotonic() + SETTLE_DEADLINE_S
    while True:
        task = await client.get_task(GetTaskRequest(id=task_id))
        if task.status.state in states:
            return task
        assert time.monotonic() < deadline, (
            f"task {task_id} stayed {state_name(task.status.state)}, wanted "
            f"{sorted(state_name(s) for s in states)}"
        )
        await asyncio.sleep(0.05)


TERMINAL = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
}
ACTIVE = {TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING}


# --- discovery --------------------------------------------------------------------------


def test_resolve_agent_card(server: RunningServer, binding: str) -> None:
    async def scenario() -> None:
        async with sdk(server, binding) as s:
            card = s.card
            assert [
                (i.url, i.protocol_binding, i.protocol_version) for i in card.supported_interfaces
            ] == [(server.url, "HTTP+JSON", "1.0"), (server.url, "JSONRPC", "1.0")]
            assert card.capabilities.streaming is True
            assert card.capabilities.push_notifications is False
            scheme = card.security_schemes["bearer"]
            assert scheme.http_auth_security_scheme.scheme.lower() == "bearer"
            assert [list(r.schemes) for r in card.security_requirements] == [["bearer"]]
        # The one-call entry point resolves the same card and picks HTTP+JSON.
        factory = ClientFactory(
            ClientConfig(supported_protocol_bindings=[TransportProtocol.HTTP_JSON])
        )
        client = await factory.create_from_url(server.url)
        await client.close()
        # With the default configuration it picks JSON-RPC (issue 17: it used to fail
        # with "no compatible transports found"), and calls work.
        default = await ClientFactory(ClientConfig()).create_from_url(server.url)
        try:
            with pytest.raises(A2AClientError, match="401"):
                await collect(default.send_message(send_request("hello")))
        finally:
            await default.close()

    run(scenario)


def test_calls_without_the_bearer_token_are_refused(server: RunningServer, binding: str) -> None:
    async def scenario() -> None:
        async with sdk(server, binding, authenticated=False) as s:
            with pytest.raises(A2AClientError, match="401"):
                await collect(s.rest.send_message(send_request("hello")))

    run(scenario)


# --- message:send -----------------------------------------------------------------------


def test_blocking_send_returns_completed_task(server: RunningServer, binding: str) -> None:
    async def scenario() -> None:
        async with sdk(server, binding) as s:
            request = send_request("hello from the sdk")
            task = await send_for_task(s.rest, request)
            assert task.status.state == TaskState.TASK_STATE_COMPLETED
            assert task.id and task.context_id
            assert artifact_texts(task) == ["hello from the sdk"]
            assert [a.name for a in task.artifacts] == ["response"]
            assert task.history[0].message_id == request.message.message_id
            assert task.history[0].role == Role.ROLE_USER

    run(scenario)


def test_ping_returns_direct_message(server: RunningServer, binding: str) -> None:
    async def scenario() -> None:
        async with sdk(server, binding) as s:
            frame = await only_frame(s.rest.send_message(send_request("ping")))
            assert frame.WhichOneof("payload") == "message", frame
            assert frame.message.role == Role.ROLE_AGENT
            assert message_texts([frame.message]) == ["pong"]
            assert frame.message.context_id
            assert not frame.message.task_id

    run(scenario)


def test_send_with_return_immediately(server: RunningServer, binding: str) -> None:
    async def scenario() -> None:
        async with sdk(server, binding) as s:
            task = await send_for_task(s.rest, send_request("sleep: 1000", return_immediately=True))
            assert task.status.state in ACTIVE, state_name(task.status.state)
            done = await poll_task(s.rest, task.id, TERMINAL)
            assert done.status.state == TaskState.TASK_STATE_COMPLETED
            assert artifact_texts(done) == ["Slept 1000 ms."]

    run(scenario)


# --- message:stream ---------------------------------------------------------------------


def test_streaming_send_task_then_updates_until_completed(
    server: RunningServer, binding: str
) -> None:
    async def scenario() -> None:
        async with sdk(server, binding) as s:
            frames = await collect(s.streaming.send_message(send_request("sleep: 300")))
            kinds = [f.WhichOneof("payload") for f in frames]
            assert kinds[0] == "task", kinds
            assert set(kinds[1:]) <= {"status_update", "artifact_update"}, kinds
            task_id = frames[0].task.id
            for frame in frames[1:]:
                update = getattr(frame, frame.WhichOneof("payload"))
                assert update.task_id == task_id
                assert update.context_id == frames[0].task.context_id
            states = [state_of(f) for f in frames if state_of(f) is not None]
            assert states[-1] == TaskState.TASK_STATE_COMPLETED, [state_name(x) for x in states]
            assert all(x not in TERMINAL for x in states[:-1]), [state_name(x) for x in states]
            artifacts = [
                f.artifact_update.artifact for f in frames if f.HasField("artifact_update")
            ]
            assert [p.text for a in artifacts for p in a.parts] == ["Slept 300 ms."]
            # The stream ended with the task: its durable state agrees.
            task = await s.rest.get_task(GetTaskRequest(id=task_id))
            assert task.status.state == TaskState.TASK_STATE_COMPLETED

    run(scenario)


def test_streaming_ping_is_one_message_frame(server: RunningServer, binding: str) -> None:
    async def scenario() -> None:
        async with sdk(server, binding) as s:
            frame = await only_frame(s.streaming.send_message(send_request("ping")))
            assert frame.WhichOneof("payload") == "message", frame
            assert message_texts([frame.message]) == ["pong"]

    run(scenario)


# --- tasks/{id}, tasks ------------------------------------------------------------------


def test_get_task_with_history_length(server: RunningServer, binding: str) -> None:
    async def scenario() -> None:
        async with sdk(server, binding) as s:
            asked = await send_for_task(s.rest, send_request("ask: left or right?"))
            await send_for_task(s.rest, send_request("left", task_id=asked.id))
            full = await s.rest.get_task(GetTaskRequest(id=asked.id))
            assert message_texts(full.history) == ["ask: left or right?", "left or right?", "left"]
            last = await s.rest.get_task(GetTaskRequest(id=asked.id, history_length=1))
            assert message_texts(last.history) == ["left"]
            none = await s.rest.get_task(GetTaskRequest(id=asked.id, history_length=0))
            assert list(none.history) == []
            assert none.status.state == TaskState.TASK_STATE_COMPLETED
            with pytest.raises(TaskNotFoundError):
                await s.rest.get_task(GetTaskRequest(id=f"no-such-task-{uuid.uuid4()}"))

    run(scenario)


def test_list_tasks_filters_by_context_and_status(server: RunningServer, binding: str) -> None:
    async def scenario() -> None:
        async with sdk(server, binding) as s:
            done = await send_for_task(s.rest, send_request("first in context"))
            ctx = done.context_id
            busy = await send_for_task(
                s.rest, send_request("sleep: 10000", return_immediately=True, context_id=ctx)
            )
            assert busy.context_id == ctx
            await poll_task(s.rest, busy.id, {TaskState.TASK_STATE_WORKING})
            try:
                in_context = await s.rest.list_tasks(ListTasksRequest(context_id=ctx))
                assert {t.id for t in in_context.tasks} == {done.id, busy.id}
                assert in_context.total_size == 2
                assert in_context.next_page_token == ""
                # Artifacts are left out unless asked for.
                assert all(len(t.artifacts) == 0 for t in in_context.tasks)

                working = await s.rest.list_tasks(
                    ListTasksRequest(context_id=ctx, status=TaskState.TASK_STATE_WORKING)
                )
                assert [t.id for t in working.tasks] == [busy.id]
                completed = await s.rest.list_tasks(
                    ListTasksRequest(
                        context_id=ctx,
                        status=TaskState.TASK_STATE_COMPLETED,
                        include_artifacts=True,
                    )
                )
                assert [t.id for t in completed.tasks] == [done.id]
                assert artifact_texts(completed.tasks[0]) == ["first in context"]
            finally:
                await s.rest.cancel_task(CancelTaskRequest(id=busy.id))

    run(scenario)


# --- tasks/{id}:cancel ------------------------------------------------------------------


def test_cancel_then_cancel_again_is_not_cancelable(server: RunningServer, binding: str) -> None:
    async def scenario() -> None:
        async with sdk(server, binding) as s:
            task = await send_for_task(
                s.rest, send_request("sleep: 10000", return_immediately=True)
            )
            canceled = await s.rest.cancel_task(CancelTaskRequest(id=task.id))
            assert canceled.id == task.id
            assert canceled.status.state == TaskState.TASK_STATE_CANCELED
            stored = await s.rest.get_task(GetTaskRequest(id=task.id))
            assert stored.status.state == TaskState.TASK_STATE_CANCELED
            with pytest.raises(TaskNotCancelableError):
                await s.rest.cancel_task(CancelTaskRequest(id=task.id))

    run(scenario)


# --- tasks/{id}:subscribe ---------------------------------------------------------------


def test_subscribe_and_resubscribe_to_running_task(server: RunningServer, binding: str) -> None:
    async def scenario() -> None:
        async with sdk(server, binding) as s:
            request = send_request("sleep: 1500", return_immediately=True)
            task = await send_for_task(s.rest, request)
            # First subscription: take the snapshot, then drop the connection.
            async with aclosing(s.streaming.subscribe(SubscribeToTaskRequest(id=task.id))) as sub:
                first = await anext(sub)
            assert first.WhichOneof("payload") == "task", first
            assert first.task.id == task.id
            assert first.task.status.state in ACTIVE
            # Resubscribe: a fresh snapshot, then the updates until COMPLETED.
            frames = await collect(s.streaming.subscribe(SubscribeToTaskRequest(id=task.id)))
            assert frames[0].WhichOneof("payload") == "task", frames[0]
            states = [state_of(f) for f in frames if state_of(f) is not None]
            names = [state_name(x) for x in states]
            assert TaskState.TASK_STATE_WORKING in states, names
            assert states[-1] == TaskState.TASK_STATE_COMPLETED, names
            assert all(x not in TERMINAL for x in states[:-1]), names
            # A terminal task cannot be subscribed to.
            with pytest.raises(UnsupportedOperationError):
                await collect(s.streaming.subscribe(SubscribeToTaskRequest(id=task.id)))

    run(scenario)


# --- multi-turn -------------------------------------------------------------------------


def test_ask_then_follow_up_with_task_id(server: RunningServer, binding: str) -> None:
    async def scenario() -> None:
        async with sdk(server, binding) as s:
            asked = await send_for_task(s.rest, send_request("ask: which colour?"))
            assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            assert message_texts([asked.status.message]) == ["which colour?"]
            assert asked.status.message.role == Role.ROLE_AGENT
            answered = await send_for_task(s.rest, send_request("blue", task_id=asked.id))
            assert answered.id == asked.id
            assert answered.context_id == asked.context_id
            assert answered.status.state == TaskState.TASK_STATE_COMPLETED
            assert artifact_texts(answered) == ["You answered: blue"]
            assert message_texts(answered.history) == [
                "ask: which colour?",
                "which colour?",
                "blue",
            ]
            assert [m.role for m in answered.history] == [
                Role.ROLE_USER,
                Role.ROLE_AGENT,
                Role.ROLE_USER,
            ]

    run(scenario)


# --- idempotency ------------------------------------------------------------------------


def test_duplicate_send_replays_and_a_changed_payload_conflicts(
    server: RunningServer, binding: str
) -> None:
    async def scenario() -> None:
        async with sdk(server, binding) as s:
            request = send_request("exactly once")
            first = await send_for_task(s.rest, request)
            again = await send_for_task(s.rest, request)
            assert again.id == first.id
            assert again.status.state == first.status.state == TaskState.TASK_STATE_COMPLETED
            changed = SendMessageRequest(
                message=Message(
                    message_id=request.message.message_id,
                    role=Role.ROLE_USER,
                    parts=[Part(text="another payload")],
                )
            )
            # The SDK has no class for DUPLICATE_MESSAGE_ID: a generic error naming the
            # HTTP 409 (HTTP+JSON) or the JSON-RPC server error code.
            conflict = {"JSONRPC": "-32000", "HTTP+JSON": "409"}[binding]
            with pytest.raises(A2AClientError, match=conflict):
                await send_for_task(s.rest, changed)
            listed = await s.rest.list_tasks(ListTasksRequest(context_id=first.context_id))
            assert [t.id for t in listed.tasks] == [first.id]

    run(scenario)
