"""A2A v1.0.1 operation request and response messages for the HTTP+JSON binding.

A2A v1.0 Field conventions are those of :mod:`taskplane.model.fields`. For the GET
routes the HTTP layer builds the JSON object from path and query parameters and
decodes it like a body, so every field here has its wire (camelCase) name there too.

Pure data: no I/O, no trio.
"""

from __future__ import annotations

from datetime import datetime

import attrs

from taskplane.model.enums import TaskState
from taskplane.model.fields import REQUIRED, JsonObject, int32, nonempty, unset_if_empty, utc
from taskplane.model.types import Message, Task, TaskPushNotificationConfig

_R = {REQUIRED: True}


@attrs.frozen(kw_only=True)
class SendMessageConfiguration:
    """``lf.a2a.v1.SendMessageConfiguration``.

    Attributes:
        accepted_output_modes: media types the client accepts in response parts.
        task_push_notification_config: webhook to register with a new Task.
        history_length: proto ``optional`` int32 (count of messages); ``None`` = no
            limit given, ``0`` = no history.
        return_immediately: ``False`` (default) waits for a settled state ("blocking");
            ``True`` answers as soon as the Task exists.

    Raises:
        FieldError: ``history_length`` outside int32.
    """

    accepted_output_modes: tuple[str, ...] = ()
    task_push_notification_config: TaskPushNotificationConfig | None = None
    history_length: int | None = attrs.field(default=None, validator=int32)
    return_immediately: bool = False


@attrs.frozen(kw_only=True)
class SendMessageRequest:
    """``lf.a2a.v1.SendMessageRequest``: body of ``message:send`` / ``message:stream``.

    Attributes:
        tenant: tenant from the route, if any.
        message: R, the client's message.
        configuration: send options.
        metadata: request-level JSON object.
    """

    tenant: str | None = attrs.field(default=None, converter=unset_if_empty)
    message: Message
    configuration: SendMessageConfiguration | None = None
    metadata: JsonObject | None = None


@attrs.frozen(kw_only=True)
class GetTaskRequest:
    """``lf.a2a.v1.GetTaskRequest`` (``GET /tasks/{id}``).

    Attributes:
        tenant: tenant from the route, if any.
        id: R, non-empty Task id (path).
        history_length: proto ``optional`` int32 count of messages (query).
    """

    tenant: str | None = attrs.field(default=None, converter=unset_if_empty)
    id: str = attrs.field(validator=nonempty)
    history_length: int | None = attrs.field(default=None, validator=int32)


@attrs.frozen(kw_only=True)
class ListTasksRequest:
    """``lf.a2a.v1.ListTasksRequest`` (``GET /tasks``; every field from the query).

    Attributes:
        tenant: tenant from the route, if any.
        context_id: keep only Tasks of this context.
        status: keep only Tasks in this state.
        page_size: proto ``optional`` int32 count; the server's default (50) when
            ``None``. Range checks (1-100) belong to the handler, not the model.
        page_token: cursor from a previous ``next_page_token``.
        history_length: proto ``optional`` int32 count of messages per Task.
        status_timestamp_after: keep Tasks whose ``status.timestamp`` is at or
            after this instant (aware, UTC).
        include_artifacts: proto ``optional`` bool; ``None`` means the default (false).
    """

    tenant: str | None = attrs.field(default=None, converter=unset_if_empty)
    context_id: str | None = attrs.field(default=None, converter=unset_if_empty)
    status: TaskState | None = None
    page_size: int | None = attrs.field(default=None, validator=int32)
    page_token: str | None = attrs.field(default=None, converter=unset_if_empty)
    history_length: int | None = attrs.field(default=None, validator=int32)
    status_timestamp_after: datetime | None = attrs.field(default=None, converter=utc)
    include_artifacts: bool | None = None


@attrs.frozen(kw_only=True)
class ListTasksResponse:
    """``lf.a2a.v1.ListTasksResponse``. Every field is R and always on the wire.

    Their zero values are data (no match, last page), and a ProtoJSON writer omits
    them, so decoding accepts their absence.

    Attributes:
        tasks: the page of Tasks (may be empty).
        next_page_token: cursor for the next page; ``""`` on the last page.
        page_size: page size actually used (count).
        total_size: matching Tasks before pagination (count).
    """

    tasks: tuple[Task, ...] = attrs.field(default=(), metadata=_R)
    next_page_token: str = attrs.field(default="", metadata=_R)
    page_size: int = attrs.field(default=0, validator=int32, metadata=_R)
    total_size: int = attrs.field(default=0, validator=int32, metadata=_R)


@attrs.frozen(kw_only=True)
class CancelTaskRequest:
    """``lf.a2a.v1.CancelTaskRequest`` (``POST /tasks/{id}:cancel``).

    Attributes:
        tenant: tenant from the route, if any.
        id: R, non-empty Task id (path).
        metadata: JSON object from the (optional) body.
    """

    tenant: str | None = attrs.field(default=None, converter=unset_if_empty)
    id: str = attrs.field(validator=nonempty)
    metadata: JsonObject | None = None


@attrs.frozen(kw_only=True)
class SubscribeToTaskRequest:
    """``lf.a2a.v1.SubscribeToTaskRequest`` (``/tasks/{id}:subscribe``).

    Attributes:
        tenant: tenant from the route, if any.
        id: R, non-empty Task id (path).
    """

    tenant: str | None = attrs.field(default=None, converter=unset_if_empty)
    id: str = attrs.field(validator=nonempty)
