"""``decode(encode(x), type(x)) == x`` for every wire-model type, plus the encoding rules.

Strategies are derived from the attrs field types, so a new field or class is covered
without touching this file; only the leaves (text, int32, ms-precision timestamps,
JSON values) and ``Part`` have hand-written strategies.
"""

from __future__ import annotations

import json
import types
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Union, get_args, get_origin

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taskplane.model.card import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from taskplane.model.codec import MODEL_TYPES, decode, decode_json, encode, encode_json
from taskplane.model.enums import Role, TaskState
from taskplane.model.fields import INT32_MAX, INT32_MIN
from taskplane.model.requests import ListTasksRequest, ListTasksResponse, SendMessageConfiguration
from taskplane.model.types import (
    DataValue,
    Message,
    Part,
    TaskStatus,
)

# --- strategies --------------------------------------------------------------------------

TEXT = st.text(max_size=12)
JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
JSON_OBJECTS = st.dictionaries(TEXT, JSON_VALUES, max_size=3)

_ZONES = [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))]
TIMESTAMPS = st.datetimes(
    min_value=datetime(2, 1, 1),
    max_value=datetime(9998, 12, 31, 23, 59, 59),
    timezones=st.sampled_from(_ZONES),
).map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000))  # wire precision: ms


def _optional_meta(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


PARTS = st.one_of(
    st.builds(Part.from_text, TEXT),
    st.builds(Part.from_raw, st.binary(max_size=16)),
    st.builds(Part.from_url, TEXT),
    st.builds(Part.from_data, JSON_VALUES),
).flatmap(
    lambda part: st.builds(
        attrs.evolve,
        st.just(part),
        metadata=_optional_meta(JSON_OBJECTS),
        filename=_optional_meta(TEXT),
        media_type=_optional_meta(TEXT),
    )
)

_CUSTOM: dict[Any, st.SearchStrategy[Any]] = {
    str: TEXT,
    bool: st.booleans(),
    int: st.integers(INT32_MIN, INT32_MAX),
    bytes: st.binary(max_size=16),
    datetime: TIMESTAMPS,
    dict[str, Any]: JSON_OBJECTS,
    DataValue: st.builds(DataValue, JSON_VALUES),
    Part: PARTS,
}


def _is_union(t: Any) -> bool:
    return get_origin(t) in (Union, types.UnionType)


def strategy_for(t: Any, *, nonempty: bool = False) -> st.SearchStrategy[Any]:
    """A strategy for values of the (resolved) field type ``t``."""
    if _is_union(t):
        (inner,) = (a for a in get_args(t) if a is not type(None))
        return st.none() | strategy_for(inner)
    if t is str and nonempty:
        return st.text(min_size=1, max_size=12)
    if t in _CUSTOM:
        return _CUSTOM[t]
    if isinstance(t, type) and issubclass(t, Role | TaskState):
        return st.sampled_from(t)
    origin = get_origin(t)
    if origin is tuple:
        item = get_args(t)[0]
        size = 3 if item is str else 2  # nested records are costly to generate
        return st.lists(strategy_for(item), min_size=int(nonempty), max_size=size).map(tuple)
    if origin is dict:
        return st.dictionaries(TEXT, strategy_for(get_args(t)[1]), max_size=2)
    if attrs.has(t):
        return class_strategy(t)
    raise NotImplementedError(f"no strategy for {t!r}")


def class_strategy(cls: type) -> st.SearchStrategy[Any]:
    """``st.builds`` over every field; a oneof class gets exactly one member set."""
    attrs.resolve_types(cls)
    fields = {a.name: a for a in attrs.fields(cls)}

    def field(name: str) -> st.SearchStrategy[Any]:
        a = fields[name]
        # R fields without a default must be non-empty (validator `nonempty`).
        required = a.default is attrs.NOTHING
        return strategy_for(a.type, nonempty=required)

    oneof: tuple[str, ...] = getattr(cls, "ONEOF", ())
    rest = {name: field(name) for name in fields if name not in oneof}
    if not oneof:
        return st.builds(cls, **rest)
    return st.sampled_from(oneof).flatmap(
        lambda member: st.builds(
            cls, **rest, **{member: strategy_for(get_args(fields[member].type)[0])}
        )
    )


# --- the property ------------------------------------------------------------------------

EXPECTED_TYPES = {
    "Part", "Message", "Artifact", "TaskStatus", "Task", "TaskStatusUpdateEvent",
    "TaskArtifactUpdateEvent", "SendMessageConfiguration", "SendMessageRequest",
    "SendMessageResponse", "StreamResponse", "GetTaskRequest", "ListTasksRequest",
    "ListTasksResponse", "CancelTaskRequest", "SubscribeToTaskRequest",
    "TaskPushNotificationConfig", "AuthenticationInfo", "AgentCard", "AgentInterface",
    "AgentProvider", "AgentCapabilities", "AgentExtension", "AgentSkill",
    "AgentCardSignature", "SecurityScheme", "APIKeySecurityScheme",
    "HTTPAuthSecurityScheme", "OAuth2SecurityScheme", "OpenIdConnectSecurityScheme",
    "MutualTlsSecurityScheme", "OAuthFlows", "AuthorizationCodeOAuthFlow",
    "ClientCredentialsOAuthFlow", "ImplicitOAuthFlow", "PasswordOAuthFlow",
    "DeviceCodeOAuthFlow", "SecurityRequirement", "StringList",
}  # fmt: skip


def test_every_model_type_is_covered() -> None:
    assert {cls.__name__ for cls in MODEL_TYPES} == EXPECTED_TYPES


@pytest.mark.parametrize("cls", MODEL_TYPES, ids=lambda cls: cls.__name__)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_decode_inverts_encode(cls: type, data: st.DataObject) -> None:
    x = data.draw(strategy_for(cls), label=cls.__name__)
    wire = encode(x)
    assert decode(wire, cls) == x
    assert decode_json(encode_json(x), cls) == x
    # Encoding is deterministic and the wire value is plain JSON.
    assert json.loads(encode_json(x)) == json.loads(json.dumps(wire))


# --- encoding rules (digest D1) ------------------------------------------------------------


def _message(**kw: Any) -> Message:
    return Message(message_id="m", role=Role.ROLE_USER, parts=(Part.from_text("hi"),), **kw)


def test_unset_fields_are_omitted_and_names_are_camel_case() -> None:
    assert encode(_message(context_id="", extensions=())) == {
        "messageId": "m",
        "role": "ROLE_USER",
        "parts": [{"text": "hi"}],
    }
    assert encode(_message(reference_task_ids=("t",)))["referenceTaskIds"] == ["t"]
    assert encode(SendMessageConfiguration()) == {}


def test_optional_scalars_are_kept_when_zero() -> None:
    assert encode(SendMessageConfiguration(history_length=0, return_immediately=False)) == {
        "historyLength": 0
    }
    assert encode(ListTasksRequest(page_size=0, include_artifacts=False)) == {
        "pageSize": 0,
        "includeArtifacts": False,
    }
    assert encode(AgentCapabilities(streaming=False, push_notifications=False)) == {
        "streaming": False,
        "pushNotifications": False,
    }


def test_required_fields_are_always_emitted() -> None:
    assert encode(ListTasksResponse()) == {
        "tasks": [],
        "nextPageToken": "",
        "pageSize": 0,
        "totalSize": 0,
    }
    card = AgentCard(
        name="a",
        description="b",
        supported_interfaces=(
            AgentInterface(url="u", protocol_binding="HTTP+JSON", protocol_version="1.0"),
        ),
        version="1",
        capabilities=AgentCapabilities(),
        skills=(AgentSkill(id="s", name="S", description="d"),),
    )
    wire = encode(card)
    assert wire["capabilities"] == {}
    assert wire["defaultInputModes"] == []
    assert wire["defaultOutputModes"] == []
    assert wire["skills"] == [{"id": "s", "name": "S", "description": "d", "tags": []}]


def test_set_empty_struct_is_kept() -> None:
    assert encode(_message(metadata={}))["metadata"] == {}


def test_data_part_holding_null_is_emitted() -> None:
    assert encode(Part.from_data(None)) == {"data": None}
    assert encode_json(Part.from_data(None)) == b'{"data":null}'


def test_bytes_are_standard_padded_base64() -> None:
    assert encode(Part.from_raw(b"\xfb\xff")) == {"raw": "+/8="}
    assert encode(Part.from_raw(b"")) == {"raw": ""}


def test_timestamps_are_utc_milliseconds_with_z() -> None:
    stamp = datetime(2026, 11, 30, 12, 0, 0, 123999, tzinfo=timezone(timedelta(hours=2)))
    wire = encode(TaskStatus(state=TaskState.TASK_STATE_WORKING, timestamp=stamp))
    assert wire == {"state": "TASK_STATE_WORKING", "timestamp": "2026-11-30T10:00:00.123Z"}
    early = datetime(7, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert encode(ListTasksRequest(status_timestamp_after=early)) == {
        "statusTimestampAfter": "0007-01-02T03:04:05.000Z"
    }


def test_enums_are_names() -> None:
    assert encode(ListTasksRequest(status=TaskState.TASK_STATE_CANCELED)) == {
        "status": "TASK_STATE_CANCELED"
    }


def test_encode_json_is_compact_utf8_on_one_line() -> None:
    raw = encode_json(_message(metadata={"k": "é\n\u2028"}))
    assert (
        raw
        == (
            '{"messageId":"m","role":"ROLE_USER","parts":[{"text":"hi"}],'
            '"metadata":{"k":"é\\n\u2028"}}'
        ).encode()
    )
    assert b"\n" not in raw and b"\r" not in raw


def test_encode_rejects_non_model_values() -> None:
    with pytest.raises(TypeError):
        encode({"messageId": "m"})
    with pytest.raises(TypeError):
        encode(DataValue(1))
