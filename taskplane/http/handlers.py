"""A2A HTTP+JSON operation handlers: authenticate, decode, ask an actor, encode.

Handlers never touch the store: every operation is a request to the task plane's
actors (:class:`~taskplane.actors.plane.TaskPlane`). Each returns a :class:`Reply`
(JSON) or an :class:`EventStream` (SSE); errors are raised as
:class:`~taskplane.errors.TaskplaneError` and rendered by the app.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncGenerator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import attrs
import trio

from taskplane.actors import logic
from taskplane.actors.plane import SendOutcome, TaskPlane
from taskplane.errors import (
    InvalidRequest,
    PushNotificationNotSupported,
    UnsupportedOperation,
)
from taskplane.http.body import check_message_size
from taskplane.http.fanout import FrameEncoder
from taskplane.http.metrics import Metrics
from taskplane.http.page_tokens import PageTokens
from taskplane.http.query import (
    GET_TASK_PARAMS,
    LIST_TASKS_PARAMS,
    NO_PARAMS,
    Query,
    check_no_query,
    parse_history_length,
    parse_list_tasks_query,
    unknown_params,
)
from taskplane.http.sse import sse_frame
from taskplane.http.streams import forward, nothing, once
from taskplane.model.codec import decode_request, encode
from taskplane.model.enums import Role
from taskplane.model.requests import (
    CancelTaskRequest,
    ListTasksResponse,
    SendMessageRequest,
    SubscribeToTaskRequest,
)
from taskplane.model.types import Message, StreamResponse, Task
from taskplane.scope import Scope

log = logging.getLogger("taskplane.http")

T = TypeVar("T")


@attrs.frozen
class Call:
    """One authenticated request, as the handlers see it.

    Attributes:
        scope: (tenant from the path, principal from the bearer token).
        task_id: the ``{id}`` path segment, when the route has one.
        body: the parsed JSON object (``{}`` for an empty body).
        query: the query parameters (werkzeug MultiDict or a mapping of lists).
        extensions: extension URIs activated for this request (``A2A-Extensions``).
        head: the request is ``HEAD``: answer the headers a ``GET`` would get, and
            open nothing (no subscription) since no body will be read.
    """

    scope: Scope
    task_id: str | None
    body: Mapping[str, Any]
    query: Query
    extensions: tuple[str, ...]
    head: bool = False


@attrs.frozen
class Reply:
    """A JSON answer: HTTP 200 with ``body``."""

    body: Mapping[str, Any]


@attrs.frozen
class EventStream:
    """An SSE answer: HTTP 200, ``text/event-stream``, one ``data:`` line per frame."""

    frames: AsyncGenerator[bytes, None]


class Handlers:
    """The operations of the Surface table (docs/design-rules.md), bound to one plane.

    Args:
        plane: the actor facade.
        blocking_timeout_s: how long a blocking ``message:send`` waits to settle.
        page_tokens: signs ``GET /tasks`` page tokens (a fresh key when omitted).
        metrics: where sends are counted (a private registry when omitted).

    Shutdown (:meth:`stop`): blocking sends answer at once with the Task's current
    snapshot, and open streams end with a final ``UNAVAILABLE`` error frame telling
    the client to read the Task and subscribe again (rule: "A blocking send is
    bounded").
    """

    def __init__(
        self,
        plane: TaskPlane,
        *,
        blocking_timeout_s: float,
        page_tokens: PageTokens | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.plane = plane
        self.blocking_timeout_s = blocking_timeout_s
        self.page_tokens = page_tokens if page_tokens is not None else PageTokens()
        self.metrics = metrics if metrics is not None else Metrics()
        self.stopping = False
        self.encode_frame = FrameEncoder()
        self._waits: set[trio.CancelScope] = set()
        self._streams: set[trio.MemoryReceiveChannel[StreamResponse]] = set()

    def stop(self) -> None:
        """Server shutdown: end every blocking wait and every open stream now."""
        self.stopping = True
        for scope in self._waits:
            scope.cancel()
        for frames in self._streams:
            frames.close()

    async def _wait_settled(self, scope: Scope, task: Task) -> Task:
        """The Task once settled, at the blocking timeout, or at shutdown (snapshot)."""
        if self.stopping:
            return await self.plane.get_task(scope, task.id)
        with trio.CancelScope() as waiting:
            self._waits.add(waiting)
            try:
                return await self.plane.wait_settled(scope, task.id, self.blocking_timeout_s)
            finally:
                self._waits.discard(waiting)
        log.info(
            "blocking send answered with the current snapshot: the server is stopping",
            extra={"event": "blocking_send_stopped", "taskId": task.id},
        )
        return await self.plane.get_task(scope, task.id)

    def _stream(
        self,
        frames: trio.MemoryReceiveChannel[StreamResponse],
        *,
        stop_when_interrupted: bool,
        first: StreamResponse | None = None,
    ) -> EventStream:
        if self.stopping:
            frames.close()
        self._streams.add(frames)
        return EventStream(
            forward(
                frames,
                self.encode_frame,
                stop_when_interrupted=stop_when_interrupted,
                first=first,
                streams=self._streams,
            )
        )

    def _decode(self, body: Mapping[str, Any], cls: type[T]) -> T:
        """``body`` as ``cls``, unknown fields ignored, counted and logged at DEBUG
        (rule "unknown fields are ignored", A2A §5.7).

        Raises:
            InvalidRequest: any other misfit (wrong type, missing field, bad enum...).
        """
        decoded = decode_request(body, cls)
        self._ignored(cls.__name__, decoded.ignored)
        return decoded.value

    def _query(self, call: Call, request: str, allowed: frozenset[str]) -> Query:
        """The call's query, its unknown parameters counted and logged as ignored."""
        self._ignored(request, unknown_params(call.query, allowed))
        return call.query

    def _ignored(self, request: str, fields: Sequence[str]) -> None:
        if not fields:
            return
        self.metrics.unknown_fields.labels(request).inc(len(fields))
        log.debug(
            "ignored %d unknown field(s) of %s",
            len(fields),
            request,
            extra={"event": "a2a_unknown_fields", "request": request, "fields": list(fields)},
        )

    def _send_request(self, call: Call) -> SendMessageRequest:
        check_no_query(self._query(call, "SendMessageRequest", NO_PARAMS))
        body = dict(call.body)
        body.pop("tenant", None)  # the path's tenant rules (proto http bindings)
        check_message_size(body.get("message"))
        request = self._decode(body, SendMessageRequest)
        config = request.configuration
        if config is not None and config.task_push_notification_config is not None:
            raise PushNotificationNotSupported(
                "push notifications are not supported by this agent (see its Agent Card); "
                "omit configuration.taskPushNotificationConfig and stream or subscribe instead"
            )
        if config is not None and config.history_length is not None and config.history_length < 0:
            raise InvalidRequest(
                "configuration.historyLength must be >= 0",
                field_violations=[("configuration.historyLength", "must be >= 0")],
            )
        _check_ids(request.message)
        if request.message.role is not Role.ROLE_USER:
            raise InvalidRequest(
                "message.role must be ROLE_USER for a client message",
                field_violations=[("message.role", "must be ROLE_USER")],
            )
        return request

    async def send(self, call: Call) -> Reply:
        """``POST /message:send``: a Task (blocking until settled unless
        ``returnImmediately``) or a direct Message (SendMessageResponse)."""
        request = self._send_request(call)
        outcome = await self.plane.send(call.scope, request.message, call.extensions)
        self._count_send(outcome)
        if outcome.reply is not None:
            return Reply({"message": encode(outcome.reply)})
        task = outcome.task
        assert task is not None
        config = request.configuration
        if not (config is not None and config.return_immediately) and not (
            task.status.state.is_settled
        ):
            task = await self._wait_settled(call.scope, task)
        history_length = config.history_length if config is not None else None
        return Reply({"task": encode(logic.for_caller(task, history_length=history_length))})

    async def stream(self, call: Call) -> EventStream:
        """``POST /message:stream``: the Task, then its updates, until terminal or
        interrupted; a direct Message is the only frame."""
        request = self._send_request(call)
        outcome = await self.plane.send(call.scope, request.message, call.extensions)
        self._count_send(outcome)
        if outcome.reply is not None:
            only = sse_frame({"message": encode(outcome.reply)})
            return EventStream(once(only))
        assert outcome.task is not None
        frames = await self.plane.subscribe(call.scope, outcome.task.id)
        return self._stream(frames, stop_when_interrupted=True)

    def _count_send(self, outcome: SendOutcome) -> None:
        disposition = outcome.disposition if outcome.reply is None else "message"
        self.metrics.sends.labels(disposition).inc()
        task = outcome.task
        log.info(
            "send %s",
            disposition,
            extra={
                "event": "a2a_send_accepted",
                "disposition": disposition,
                "taskId": task.id if task is not None else None,
                "contextId": task.context_id if task is not None else None,
                "state": task.status.state.name if task is not None else None,
            },
        )

    async def get(self, call: Call) -> Reply:
        """``GET /tasks/{id}``: the durable Task, history trimmed by ``historyLength``."""
        history_length = parse_history_length(self._query(call, "GetTaskRequest", GET_TASK_PARAMS))
        task = await self.plane.get_task(call.scope, _task_id(call))
        return Reply(encode(logic.for_caller(task, history_length=history_length)))

    async def list(self, call: Call) -> Reply:
        """``GET /tasks``: the caller's Tasks, newest status first, paginated.

        Raises:
            InvalidRequest: a ``pageToken`` this process did not issue for this query.
        """
        query = parse_list_tasks_query(self._query(call, "ListTasksRequest", LIST_TASKS_PARAMS))
        bound = (
            call.scope.tenant,
            call.scope.principal,
            query.context_id,
            query.status.name if query.status is not None else None,
            query.status_timestamp_after.isoformat() if query.status_timestamp_after else None,
        )
        cursor = self.page_tokens.open(query.page_token, bound) if query.page_token else None
        page = await self.plane.list_tasks(
            call.scope,
            context_id=query.context_id,
            state=query.status,
            status_after=query.status_timestamp_after,
            page_size=query.page_size,
            page_token=cursor,
        )
        shown = tuple(
            logic.for_caller(
                task,
                history_length=query.history_length,
                include_artifacts=query.include_artifacts,
            )
            for task in page.tasks
        )
        response = ListTasksResponse(
            tasks=shown,
            next_page_token=self.page_tokens.seal(page.next_page_token, bound),
            page_size=query.page_size,
            total_size=page.total_size,
        )
        return Reply(encode(response))

    async def cancel(self, call: Call) -> Reply:
        """``POST /tasks/{id}:cancel``: CANCELED, or 400 TASK_NOT_CANCELABLE if terminal."""
        check_no_query(self._query(call, "CancelTaskRequest", NO_PARAMS))
        body = {k: v for k, v in call.body.items() if k != "tenant"}
        self._decode({**body, "id": _task_id(call)}, CancelTaskRequest)
        task = await self.plane.cancel(call.scope, _task_id(call))
        return Reply(encode(task))

    async def subscribe(self, call: Call) -> EventStream:
        """``GET /tasks/{id}:subscribe`` (POST alias): the snapshot, then updates, until
        terminal. A terminal Task is 400 UNSUPPORTED_OPERATION (no stream opened)."""
        check_no_query(self._query(call, "SubscribeToTaskRequest", NO_PARAMS))
        body = {k: v for k, v in call.body.items() if k != "tenant"}
        self._decode({**body, "id": _task_id(call)}, SubscribeToTaskRequest)
        if call.head:  # same checks and headers as GET, no subscription
            _check_subscribable(await self.plane.get_task(call.scope, _task_id(call)))
            return EventStream(nothing())
        frames = await self.plane.subscribe(call.scope, _task_id(call))
        first = await frames.receive()
        if first.task is not None:
            with _closing_on_error(frames):
                _check_subscribable(first.task)
        return self._stream(frames, stop_when_interrupted=False, first=first)

    async def push(self, call: Call) -> Reply:
        """Push-notification config routes: 501 (the Card says pushNotifications false)."""
        raise PushNotificationNotSupported(
            "push notifications are not supported by this agent (see its Agent Card); "
            "use message:stream or tasks/{id}:subscribe instead"
        )

    async def extended_card(self, call: Call) -> Reply:
        """``GET /extendedAgentCard``: not declared by the Card."""
        raise UnsupportedOperation("this agent declares no extended agent card")


MAX_ID_CHARS = 256
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _check_ids(message: Message) -> None:
    """messageId, taskId and contextId: 1..256 characters, no control characters."""
    for field, value in (
        ("message.messageId", message.message_id),
        ("message.taskId", message.task_id),
        ("message.contextId", message.context_id),
    ):
        if value is not None and (len(value) > MAX_ID_CHARS or _CONTROL.search(value)):
            raise InvalidRequest(
                f"{field} must be at most {MAX_ID_CHARS} characters without control characters",
                field_violations=[(field, "too long or has control characters")],
            )


def _check_subscribable(task: Task) -> None:
    if task.status.state.is_terminal:
        raise UnsupportedOperation(
            f"task {task.id} is {task.status.state.name}; "
            "a terminal task cannot be subscribed to (read it with GET instead)",
            metadata={"taskId": task.id},
        )


@contextmanager
def _closing_on_error(frames: trio.MemoryReceiveChannel[StreamResponse]) -> Iterator[None]:
    try:
        yield
    except BaseException:
        frames.close()
        raise


def _task_id(call: Call) -> str:
    assert call.task_id is not None
    return call.task_id
