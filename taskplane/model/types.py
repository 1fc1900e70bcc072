"""A2A v1.0.1 task and message records (proto ``lf.a2a.v1``), as frozen attrs classes.

Class names are the proto message names; attribute names are the proto field names
(snake_case). Field conventions (REQUIRED, presence, tuples, UTC timestamps, oneofs)
are listed in :mod:`taskplane.model.fields`. The JSON (ProtoJSON) shape is produced
and parsed only by :mod:`taskplane.model.codec`; nothing here knows about JSON text.

Every class is pure data: no I/O, no trio, safe to share between tasks. Instances
holding a dict (Struct, map) are immutable by convention only and are not hashable.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar, Literal

import attrs

from taskplane.model.enums import Role, TaskState
from taskplane.model.fields import JsonObject, check_oneof, nonempty, unset_if_empty, utc

PartKind = Literal["text", "raw", "url", "data"]


# --- content ----------------------------------------------------------------------------


@attrs.frozen
class DataValue:
    """The content of a data part: one ``google.protobuf.Value`` (any JSON value).

    ``DataValue(None)`` is a data part holding JSON ``null``; a part that is not a
    data part has ``Part.data is None``.

    Attributes:
        value: a JSON value: ``dict`` (str keys), ``list``, ``str``, ``int``,
            finite ``float``, ``bool`` or ``None``.
    """

    value: Any


@attrs.frozen(kw_only=True)
class Part:
    """``lf.a2a.v1.Part``: one piece of content.

    Exactly one of ``text``, ``raw``, ``url``, ``data`` is set (oneof ``content``);
    ``text=""`` and ``raw=b""`` are set members. Use the ``from_*`` constructors.

    Attributes:
        text: text content.
        raw: inline file bytes (base64 on the wire).
        url: URL of the file content.
        data: structured content, see :class:`DataValue`.
        metadata: free-form JSON object.
        filename: e.g. ``"document.pdf"``.
        media_type: MIME type, e.g. ``"text/plain"``; allowed on every kind.

    Raises:
        FieldError: on construction, unless exactly one content member is set.
    """

    ONEOF: ClassVar[tuple[str, ...]] = ("text", "raw", "url", "data")

    text: str | None = None
    raw: bytes | None = None
    url: str | None = None
    data: DataValue | None = None
    metadata: JsonObject | None = None
    filename: str | None = attrs.field(default=None, converter=unset_if_empty)
    media_type: str | None = attrs.field(default=None, converter=unset_if_empty)

    def __attrs_post_init__(self) -> None:
        check_oneof(self)

    @property
    def kind(self) -> PartKind:
        """Which content member is set: ``"text"``, ``"raw"``, ``"url"`` or ``"data"``."""
        if self.text is not None:
            return "text"
        if self.raw is not None:
            return "raw"
        if self.url is not None:
            return "url"
        return "data"

    @classmethod
    def from_text(
        cls,
        text: str,
        *,
        media_type: str | None = None,
        filename: str | None = None,
        metadata: JsonObject | None = None,
    ) -> Part:
        """A text part."""
        return cls(text=text, media_type=media_type, filename=filename, metadata=metadata)

    @classmethod
    def from_raw(
        cls,
        raw: bytes,
        *,
        media_type: str | None = None,
        filename: str | None = None,
        metadata: JsonObject | None = None,
    ) -> Part:
        """A file part with inline bytes."""
        return cls(raw=raw, media_type=media_type, filename=filename, metadata=metadata)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        media_type: str | None = None,
        filename: str | None = None,
        metadata: JsonObject | None = None,
    ) -> Part:
        """A file part that points at ``url``."""
        return cls(url=url, media_type=media_type, filename=filename, metadata=metadata)

    @classmethod
    def from_data(
        cls,
        value: Any,
        *,
        media_type: str | None = None,
        filename: str | None = None,
        metadata: JsonObject | None = None,
    ) -> Part:
        """A data part holding the JSON value ``value`` (``None`` = JSON ``null``)."""
        return cls(
            data=DataValue(value), media_type=media_type, filename=filename, metadata=metadata
        )


@attrs.frozen(kw_only=True)
class Message:
    """``lf.a2a.v1.Message``: one turn of communication.

    Attributes:
        message_id: R, non-empty; chosen by the author (idempotency key of a send).
        context_id: the conversation context; servers always set it.
        task_id: the Task this message belongs to, if any.
        role: R, who sent it.
        parts: R, at least one :class:`Part`.
        metadata: free-form JSON object (extension data keyed by extension URI).
        extensions: URIs of extensions present in this message.
        reference_task_ids: other Task ids this message refers to.

    Raises:
        FieldError: ``message_id`` empty or ``parts`` empty.
    """

    message_id: str = attrs.field(validator=nonempty)
    context_id: str | None = attrs.field(default=None, converter=unset_if_empty)
    task_id: str | None = attrs.field(default=None, converter=unset_if_empty)
    role: Role
    parts: tuple[Part, ...] = attrs.field(validator=nonempty)
    metadata: JsonObject | None = None
    extensions: tuple[str, ...] = ()
    reference_task_ids: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class Artifact:
    """``lf.a2a.v1.Artifact``: an output of a Task.

    Attributes:
        artifact_id: R, non-empty; unique within its Task.
        name: human-readable name.
        description: human-readable description.
        parts: R, at least one :class:`Part`.
        metadata: free-form JSON object.
        extensions: URIs of contributing extensions.

    Raises:
        FieldError: ``artifact_id`` empty or ``parts`` empty.
    """

    artifact_id: str = attrs.field(validator=nonempty)
    name: str | None = attrs.field(default=None, converter=unset_if_empty)
    description: str | None = attrs.field(default=None, converter=unset_if_empty)
    parts: tuple[Part, ...] = attrs.field(validator=nonempty)
    metadata: JsonObject | None = None
    extensions: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class TaskStatus:
    """``lf.a2a.v1.TaskStatus``.

    Attributes:
        state: R, the lifecycle state.
        message: agent message tied to this status (e.g. the INPUT_REQUIRED question).
        timestamp: when the status was recorded; aware, stored in UTC. The wire
            carries millisecond precision, so finer digits do not survive a round trip.

    Raises:
        FieldError: ``timestamp`` is naive.
    """

    state: TaskState
    message: Message | None = None
    timestamp: datetime | None = attrs.field(default=None, converter=utc)


@attrs.frozen(kw_only=True)
class Task:
    """``lf.a2a.v1.Task``.

    Attributes:
        id: R, non-empty; server-generated.
        context_id: the context; server-produced Tasks always carry it.
        status: R, current status.
        artifacts: outputs, in creation order.
        history: messages, oldest first.
        metadata: free-form JSON object.

    Raises:
        FieldError: ``id`` empty.
    """

    id: str = attrs.field(validator=nonempty)
    context_id: str | None = attrs.field(default=None, converter=unset_if_empty)
    status: TaskStatus
    artifacts: tuple[Artifact, ...] = ()
    history: tuple[Message, ...] = ()
    metadata: JsonObject | None = None


@attrs.frozen(kw_only=True)
class TaskStatusUpdateEvent:
    """``lf.a2a.v1.TaskStatusUpdateEvent``: a status change on a stream.

    Attributes:
        task_id: R, non-empty.
        context_id: R, non-empty.
        status: R, the new status.
        metadata: free-form JSON object.
    """

    task_id: str = attrs.field(validator=nonempty)
    context_id: str = attrs.field(validator=nonempty)
    status: TaskStatus
    metadata: JsonObject | None = None


@attrs.frozen(kw_only=True)
class TaskArtifactUpdateEvent:
    """``lf.a2a.v1.TaskArtifactUpdateEvent``: an artifact (or chunk) on a stream (D3).

    Attributes:
        task_id: R, non-empty.
        context_id: R, non-empty.
        artifact: R, the artifact or chunk.
        append: ``True``: add these parts to the artifact sent under the same id.
        last_chunk: ``True``: last piece of that artifact.
        metadata: free-form JSON object.
    """

    task_id: str = attrs.field(validator=nonempty)
    context_id: str = attrs.field(validator=nonempty)
    artifact: Artifact
    append: bool = False
    last_chunk: bool = False
    metadata: JsonObject | None = None


@attrs.frozen(kw_only=True)
class SendMessageResponse:
    """``lf.a2a.v1.SendMessageResponse``: body of ``POST /message:send``.

    Exactly one of ``task``, ``message`` (oneof ``payload``).

    Raises:
        FieldError: on construction, unless exactly one member is set.
    """

    ONEOF: ClassVar[tuple[str, ...]] = ("task", "message")

    task: Task | None = None
    message: Message | None = None

    def __attrs_post_init__(self) -> None:
        check_oneof(self)

    @property
    def payload(self) -> Task | Message:
        """The member that is set."""
        if self.task is not None:
            return self.task
        assert self.message is not None  # the oneof is checked on construction
        return self.message


@attrs.frozen(kw_only=True)
class StreamResponse:
    """``lf.a2a.v1.StreamResponse``: one SSE event or push body.

    Exactly one of ``task``, ``message``, ``status_update``, ``artifact_update``
    (oneof ``payload``).

    Raises:
        FieldError: on construction, unless exactly one member is set.
    """

    ONEOF: ClassVar[tuple[str, ...]] = ("task", "message", "status_update", "artifact_update")

    task: Task | None = None
    message: Message | None = None
    status_update: TaskStatusUpdateEvent | None = None
    artifact_update: TaskArtifactUpdateEvent | None = None

    def __attrs_post_init__(self) -> None:
        check_oneof(self)

    @property
    def payload(self) -> Task | Message | TaskStatusUpdateEvent | TaskArtifactUpdateEvent:
        """The member that is set."""
        if self.task is not None:
            return self.task
        if self.message is not None:
            return self.message
        if self.status_update is not None:
            return self.status_update
        assert self.artifact_update is not None  # the oneof is checked on construction
        return self.artifact_update


# --- push notification configuration ---------------------------------------


@attrs.frozen(kw_only=True)
class AuthenticationInfo:
    """``lf.a2a.v1.AuthenticationInfo``: how the agent authenticates to a webhook.

    Attributes:
        scheme: R, non-empty IANA HTTP auth scheme (``"Bearer"``, ``"Basic"``...).
        credentials: scheme-specific credentials.
    """

    scheme: str = attrs.field(validator=nonempty)
    credentials: str | None = attrs.field(default=None, converter=unset_if_empty)


@attrs.frozen(kw_only=True)
class TaskPushNotificationConfig:
    """``lf.a2a.v1.TaskPushNotificationConfig``: a webhook registered for a Task.

    Attributes:
        tenant: tenant from the route, if any.
        id: config id; assigned by the server when absent on create.
        task_id: the Task (from the route).
        url: R, non-empty webhook URL.
        token: opaque token echoed to the webhook.
        authentication: how to authenticate to the webhook.
    """

    tenant: str | None = attrs.field(default=None, converter=unset_if_empty)
    id: str | None = attrs.field(default=None, converter=unset_if_empty)
    task_id: str | None = attrs.field(default=None, converter=unset_if_empty)
    url: str = attrs.field(validator=nonempty)
    token: str | None = attrs.field(default=None, converter=unset_if_empty)
    authentication: AuthenticationInfo | None = None
