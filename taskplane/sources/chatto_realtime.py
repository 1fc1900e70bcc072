"""Chatto's realtime protocol (``chatto.realtime.v1``, protocol version 2): binary
protobuf frames over the WebSocket at ``/api/realtime``, and the handshake.

The client's first frame is ``hello`` (protocol version 2 and the bearer key); the
server answers ``hello`` (or ``error``/``close``); then ``subscribe_events`` (with the
stored resume cursor, or none for a compacted reset) is answered ``subscribed``, and the
ordered projection stream follows: ``projection_event`` frames (each with an optional
``resume_cursor`` and its operations), ``caught_up`` (a cursor at the replay-to-live
boundary), and transient ``heartbeat``/``event``/``pong`` frames.

The schema below is the part of the published ``.proto`` files this source reads,
declared by field number (what the wire carries): unknown fields and operations are
skipped by the decoder, so a newer server stays readable. Frames are decoded with the
``protobuf`` library into the protobuf-JSON shape (camel-case names) that the
ConnectRPC JSON answers use too, so one reader serves both. The nine notification
signal kinds each carry their message reference in field 1, so they share one
declared message here.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from trio_websocket import WebSocketConnection

from taskplane.actors.outbound import ProviderRejected

PROTOCOL_VERSION = 2
"""The only realtime protocol version Chatto 0.5 accepts."""

SIGNAL_KINDS = (
    "direct_message_received",
    "direct_mention_received",
    "reply_received",
    "role_mention_received",
    "here_mention_received",
    "all_mention_received",
    "followed_thread_activity",
    "followed_room_activity",
    "reaction_received",
)
"""``NotificationSignal.kind``, in field-number order (1 .. 9)."""

_S, _B, _U32, _I32, _MSG = "string", "bool", "uint32", "int32", "message"
_TYPES = {
    _S: descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
    _B: descriptor_pb2.FieldDescriptorProto.TYPE_BOOL,
    _U32: descriptor_pb2.FieldDescriptorProto.TYPE_UINT32,
    _I32: descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
    _MSG: descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
}

# message name -> (field name, number, type, message type or "", repeated, oneof or "")
Field = tuple[str, int, str, str, bool, str]
_API: dict[str, list[Field]] = {
    "RoomSummary": [("id", 1, _S, "", False, ""), ("name", 3, _S, "", False, "")],
    "User": [
        ("id", 1, _S, "", False, ""),
        ("login", 2, _S, "", False, ""),
        ("display_name", 3, _S, "", False, ""),
        ("is_bot", 8, _B, "", False, ""),
    ],
    "NotificationMessageReference": [
        ("room", 1, _MSG, ".chatto.api.v1.RoomSummary", False, ""),
        ("event_id", 2, _S, "", False, ""),
        ("thread_root_event_id", 3, _S, "", False, ""),
    ],
    "MessageSignal": [
        ("message", 1, _MSG, ".chatto.api.v1.NotificationMessageReference", False, "")
    ],
    "NotificationSignal": [
        (kind, n, _MSG, ".chatto.api.v1.MessageSignal", False, "kind")
        for n, kind in enumerate(SIGNAL_KINDS, start=1)
    ],
    "NotificationOccurrence": [
        ("id", 1, _S, "", False, ""),
        ("actor", 3, _MSG, ".chatto.api.v1.User", False, ""),
        ("signal", 4, _MSG, ".chatto.api.v1.NotificationSignal", False, ""),
        ("unread", 5, _B, "", False, ""),
    ],
    "ListNotificationOccurrencesResponse": [
        ("occurrences", 1, _MSG, ".chatto.api.v1.NotificationOccurrence", True, ""),
        ("unread_count", 3, _I32, "", False, ""),
    ],
}
_RT = ".chatto.realtime.v1."
_REALTIME: dict[str, list[Field]] = {
    "RealtimeClientHello": [
        ("protocol_version", 1, _U32, "", False, ""),
        ("bearer_token", 2, _S, "", False, ""),
    ],
    "RealtimeSubscribeEvents": [
        ("resume_cursor", 1, _S, "", False, ""),
        ("retained_room_ids", 2, _S, "", True, ""),
    ],
    "RealtimePing": [("nonce", 1, _S, "", False, "")],
    "RealtimeClientFrame": [
        ("hello", 1, _MSG, _RT + "RealtimeClientHello", False, "frame"),
        ("subscribe_events", 2, _MSG, _RT + "RealtimeSubscribeEvents", False, "frame"),
        ("ping", 3, _MSG, _RT + "RealtimePing", False, "frame"),
    ],
    "RealtimeServerHello": [
        ("protocol_version", 1, _U32, "", False, ""),
        ("server_version", 2, _S, "", False, ""),
        ("heartbeat_interval_seconds", 4, _U32, "", False, ""),
        ("capabilities", 5, _S, "", True, ""),
    ],
    "RealtimeSubscribed": [("start_cursor", 2, _S, "", False, "")],
    "RealtimeEventEnvelope": [("id", 1, _S, "", False, "")],
    "RealtimeHeartbeat": [("id", 1, _S, "", False, "")],
    "RealtimeError": [
        ("code", 1, _S, "", False, ""),
        ("message", 2, _S, "", False, ""),
        ("fatal", 3, _B, "", False, ""),
        ("retry_after_ms", 4, _U32, "", False, ""),
    ],
    "RealtimeClose": [
        ("code", 1, _S, "", False, ""),
        ("message", 2, _S, "", False, ""),
        ("reconnect", 3, _B, "", False, ""),
        ("retry_after_ms", 4, _U32, "", False, ""),
    ],
    "RealtimePong": [("nonce", 1, _S, "", False, "")],
    "RealtimeCaughtUp": [("cursor", 1, _S, "", False, "")],
    "RealtimeProjectionReset": [],
    "RealtimeProjectionNotificationOccurrencesReplace": [
        ("play_notification_sound", 1, _B, "", False, ""),
        (
            "occurrences",
            2,
            _MSG,
            ".chatto.api.v1.ListNotificationOccurrencesResponse",
            False,
            "",
        ),
    ],
    "RealtimeProjectionOperation": [
        ("reset", 1, _MSG, _RT + "RealtimeProjectionReset", False, "operation"),
        (
            "notification_occurrences_replace",
            19,
            _MSG,
            _RT + "RealtimeProjectionNotificationOccurrencesReplace",
            False,
            "operation",
        ),
    ],
    "RealtimeProjectionEvent": [
        ("id", 1, _S, "", False, ""),
        ("actor_id", 3, _S, "", False, ""),
        ("resume_cursor", 4, _S, "", False, ""),
        ("operations", 5, _MSG, _RT + "RealtimeProjectionOperation", True, ""),
    ],
    "RealtimeServerFrame": [
        ("hello", 1, _MSG, _RT + "RealtimeServerHello", False, "frame"),
        ("subscribed", 2, _MSG, _RT + "RealtimeSubscribed", False, "frame"),
        ("event", 3, _MSG, _RT + "RealtimeEventEnvelope", False, "frame"),
        ("heartbeat", 4, _MSG, _RT + "RealtimeHeartbeat", False, "frame"),
        ("error", 5, _MSG, _RT + "RealtimeError", False, "frame"),
        ("close", 6, _MSG, _RT + "RealtimeClose", False, "frame"),
        ("pong", 7, _MSG, _RT + "RealtimePong", False, "frame"),
        ("caught_up", 8, _MSG, _RT + "RealtimeCaughtUp", False, "frame"),
        ("projection_event", 9, _MSG, _RT + "RealtimeProjectionEvent", False, "frame"),
    ],
}


def _file(name: str, package: str, messages: dict[str, list[Field]], deps: list[str]) -> Any:
    proto = descriptor_pb2.FileDescriptorProto(
        name=name, package=package, syntax="proto3", dependency=deps
    )
    for message, fields in messages.items():
        declared = proto.message_type.add(name=message)
        oneofs: list[str] = []
        for field, number, kind, type_name, repeated, oneof in fields:
            entry = declared.field.add(
                name=field,
                number=number,
                type=_TYPES[kind],
                label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
                if repeated
                else descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
            )
            if type_name:
                entry.type_name = type_name
            if oneof:
                if oneof not in oneofs:
                    oneofs.append(oneof)
                    declared.oneof_decl.add(name=oneof)
                entry.oneof_index = oneofs.index(oneof)
    return proto


def _classes() -> dict[str, Any]:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file("taskplane/chatto_api_subset.proto", "chatto.api.v1", _API, []))
    pool.Add(
        _file(
            "taskplane/chatto_realtime_subset.proto",
            "chatto.realtime.v1",
            _REALTIME,
            ["taskplane/chatto_api_subset.proto"],
        )
    )
    found: dict[str, Any] = {}
    for package, names in (("chatto.api.v1", _API), ("chatto.realtime.v1", _REALTIME)):
        for name in names:
            found[name] = message_factory.GetMessageClass(
                pool.FindMessageTypeByName(f"{package}.{name}")
            )
    return found


_CLASSES: Mapping[str, Any] = MappingProxyType(_classes())  # read-only: the message classes


def encode(message: str, value: dict[str, Any]) -> bytes:
    """``value`` (protobuf JSON, camel-case or field names) as the binary protobuf
    ``message`` (a name of this module's schema, ``"RealtimeClientFrame"``); fields
    the schema does not declare are left out.

    Raises:
        ValueError: ``value`` does not fit the schema.
    """
    try:
        parsed = json_format.ParseDict(value, _CLASSES[message](), ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise ValueError(f"{message}: {exc}") from exc
    data: bytes = parsed.SerializeToString()
    return data


def decode(message: str, data: bytes) -> dict[str, Any]:
    """The binary protobuf ``message`` in ``data`` as protobuf JSON (camel-case names,
    default values left out, unknown fields skipped).

    Raises:
        ValueError: ``data`` is not a valid encoding of ``message``.
    """
    parsed = _CLASSES[message]()
    try:
        parsed.ParseFromString(data)
    except Exception as exc:  # protobuf's DecodeError, whichever implementation
        raise ValueError(f"{message}: {exc}") from exc
    value: dict[str, Any] = json_format.MessageToDict(parsed)
    return value


class ChattoRealtimeRefused(ProviderRejected):
    """The server answered the handshake with ``error`` or ``close`` (a bad key, a
    protocol version it does not speak).

    Attributes:
        retry_after_s: the reconnect delay the server suggested, else ``None``.
    """

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ChattoCursorRefused(ChattoRealtimeRefused):
    """The server refused the subscription from the stored resume cursor (after it
    accepted ``hello``): the cursor is no longer usable."""


def realtime_url(base_url: str) -> str:
    """The WebSocket endpoint of the server at ``base_url`` (``ws``/``wss``)."""
    scheme, rest = base_url.rstrip("/").split("://", 1)
    return f"{'wss' if scheme == 'https' else 'ws'}://{rest}/api/realtime"


def refusal(frame: dict[str, Any]) -> ChattoRealtimeRefused | None:
    """The refusal a server ``error`` (fatal) or ``close`` frame carries, else ``None``."""
    for key in ("error", "close"):
        body = frame.get(key)
        if isinstance(body, dict) and (key == "close" or body.get("fatal")):
            wait = body.get("retryAfterMs")
            return ChattoRealtimeRefused(
                f"realtime {key}: {body.get('code', '')}: {body.get('message', '')}",
                float(wait) / 1000 if isinstance(wait, int) and wait > 0 else None,
            )
    return None


async def read_frame(ws: WebSocketConnection) -> dict[str, Any]:
    """The next server frame that decodes (a text or undecodable frame is skipped).

    Raises:
        ConnectionClosed: the connection closed.
    """
    while True:
        data = await ws.get_message()
        if isinstance(data, bytes):
            try:
                return decode("RealtimeServerFrame", data)
            except ValueError:
                continue


@attrs.frozen
class Session:
    """An open subscription.

    Attributes:
        start_cursor: the ``subscribed`` start cursor (may be empty).
        heartbeat_s: the heartbeat interval the server's ``hello`` announced, in
            seconds (``0``: none announced).
    """

    start_cursor: str
    heartbeat_s: float


async def open_session(ws: WebSocketConnection, token: str, resume_cursor: str | None) -> Session:
    """Say ``hello``, then ``subscribe_events`` from ``resume_cursor`` (``None``: a
    compacted reset); the :class:`Session`.

    Raises:
        ChattoCursorRefused: the server refused ``subscribe_events`` from
            ``resume_cursor``.
        ChattoRealtimeRefused: the server answered ``error`` or ``close`` otherwise.
        ConnectionClosed: the connection closed first.
    """
    hello = {"hello": {"protocolVersion": PROTOCOL_VERSION, "bearerToken": token}}
    await ws.send_message(encode("RealtimeClientFrame", hello))
    server_hello = await _expect(ws, "hello")
    subscribe: dict[str, Any] = {"subscribeEvents": {}}
    if resume_cursor:
        subscribe["subscribeEvents"]["resumeCursor"] = resume_cursor
    await ws.send_message(encode("RealtimeClientFrame", subscribe))
    try:
        subscribed = await _expect(ws, "subscribed")
    except ChattoRealtimeRefused as exc:
        if resume_cursor:
            raise ChattoCursorRefused(str(exc), exc.retry_after_s) from exc
        raise
    heartbeat = server_hello.get("heartbeatIntervalSeconds")
    return Session(
        str(subscribed.get("startCursor", "")),
        float(heartbeat) if isinstance(heartbeat, int) and heartbeat > 0 else 0.0,
    )


async def _expect(ws: WebSocketConnection, key: str) -> dict[str, Any]:
    while True:
        frame = await read_frame(ws)
        refused = refusal(frame)
        if refused is not None:
            raise refused
        if key in frame:
            body = frame[key]
            return body if isinstance(body, dict) else {}
