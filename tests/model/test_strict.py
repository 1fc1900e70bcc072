"""Strict decoding: one test per rejection rule, each naming the wire field path.

Strictness is a product decision that departs from the digest's lenient [REC]
(D1: accept snake_case, enum numbers, numeric strings, unknown keys). These tests
record it. The last section checks that the model enforces the same invariants when
built from Python.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from taskplane.errors import InvalidRequest
from taskplane.model.card import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    HTTPAuthSecurityScheme,
    MutualTlsSecurityScheme,
    OAuthFlows,
    SecurityScheme,
)
from taskplane.model.codec import decode, decode_json
from taskplane.model.enums import Role, TaskState
from taskplane.model.fields import FieldError
from taskplane.model.requests import (
    ListTasksRequest,
    ListTasksResponse,
    SendMessageConfiguration,
    SendMessageRequest,
)
from taskplane.model.types import (
    DataValue,
    Message,
    Part,
    SendMessageResponse,
    StreamResponse,
    Task,
    TaskStatus,
)

REQUEST: dict[str, Any] = {
    "message": {
        "messageId": "m-1",
        "role": "ROLE_USER",
        "parts": [{"text": "hello"}],
        "extensions": ["https://example.com/ext/v1"],
    },
    "configuration": {"historyLength": 3},
}


def _with(path: str, value: Any) -> dict[str, Any]:
    """A copy of REQUEST with ``value`` at a dotted path (``[i]`` for list items)."""
    doc = copy.deepcopy(REQUEST)
    *parents, leaf = path.replace("[", ".").replace("]", "").split(".")
    node: Any = doc
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if isinstance(node, list):
        node[int(leaf)] = value
    else:
        node[leaf] = value
    return doc


def _without(path: str) -> dict[str, Any]:
    doc = copy.deepcopy(REQUEST)
    *parents, leaf = path.split(".")
    node: Any = doc
    for key in parents:
        node = node[key]
    del node[leaf]
    return doc


def _rejected(data: Any, cls: type = SendMessageRequest) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        decode(data, cls)
    return caught.value


def _assert_names(error: InvalidRequest, path: str) -> str:
    """The violation at ``path`` exists and the message names it; returns its description."""
    found = dict(error.field_violations)
    assert path in found, error.field_violations
    assert path in error.message
    return found[path]


def test_baseline_request_is_accepted() -> None:
    request = decode(REQUEST, SendMessageRequest)
    assert request.message.parts == (Part.from_text("hello"),)
    assert request.configuration == SendMessageConfiguration(history_length=3)


# --- one test per rule --------------------------------------------------------------------


def test_rejects_unknown_key() -> None:
    error = _rejected(_with("message.bogus", 1))
    assert "unknown field" in _assert_names(error, "message.bogus")


def test_rejects_unknown_key_at_top_level() -> None:
    error = _rejected({**REQUEST, "blocking": True})
    assert "unknown field" in _assert_names(error, "blocking")


def test_rejects_snake_case_key() -> None:
    doc = _without("message.messageId")
    doc["message"]["message_id"] = "m-1"
    error = _rejected(doc)
    assert "'messageId'" in _assert_names(error, "message.message_id")


def test_rejects_enum_number() -> None:
    error = _rejected(_with("message.role", 1))
    assert "number" in _assert_names(error, "message.role")


def test_rejects_unknown_enum_name() -> None:
    error = _rejected(_with("message.role", "ROLE_NOPE"))
    assert "ROLE_NOPE" in _assert_names(error, "message.role")


@pytest.mark.parametrize("name", ["ROLE_UNSPECIFIED", "role_user", "user"])
def test_rejects_unspecified_and_legacy_enum_names(name: str) -> None:
    _assert_names(_rejected(_with("message.role", name)), "message.role")


def test_rejects_numeric_string_for_int() -> None:
    error = _rejected(_with("configuration.historyLength", "3"))
    assert "string" in _assert_names(error, "configuration.historyLength")


def test_rejects_bool_for_int() -> None:
    error = _rejected(_with("configuration.historyLength", True))
    assert "boolean" in _assert_names(error, "configuration.historyLength")


def test_rejects_fractional_number_for_int() -> None:
    _assert_names(
        _rejected(_with("configuration.historyLength", 2.5)), "configuration.historyLength"
    )


def test_accepts_integral_float_for_int_like_the_reference_parser() -> None:
    request = decode(_with("configuration.historyLength", 3.0), SendMessageRequest)
    assert request.configuration is not None
    assert request.configuration.history_length == 3


def test_rejects_int_outside_int32() -> None:
    _assert_names(
        _rejected(_with("configuration.historyLength", 2**31)), "configuration.historyLength"
    )


def test_rejects_string_where_array_expected() -> None:
    error = _rejected(_with("message.parts", "hello"))
    assert "array" in _assert_names(error, "message.parts")


def test_rejects_object_where_array_expected() -> None:
    error = _rejected(_with("message.extensions", {"a": "b"}))
    assert "array" in _assert_names(error, "message.extensions")


def test_rejects_two_oneof_members() -> None:
    error = _rejected(_with("message.parts[0]", {"text": "a", "url": "https://x"}))
    assert "text" in _assert_names(error, "message.parts[0].url")


def test_data_null_counts_as_a_oneof_member() -> None:
    error = _rejected(_with("message.parts[0]", {"text": "a", "data": None}))
    _assert_names(error, "message.parts[0].data")


@pytest.mark.parametrize(
    ("cls", "data", "path"),
    [
        (SendMessageResponse, {"task": {}, "message": {}}, "message"),
        (StreamResponse, {"message": {}, "statusUpdate": {}}, "statusUpdate"),
        (
            SecurityScheme,
            {"mtlsSecurityScheme": {}, "apiKeySecurityScheme": {}},
            "mtlsSecurityScheme",
        ),
        (OAuthFlows, {"implicit": {}, "password": {}}, "password"),
    ],
)
def test_rejects_two_oneof_members_in_every_oneof(cls: type, data: Any, path: str) -> None:
    _assert_names(_rejected(data, cls), path)


@pytest.mark.parametrize(
    "cls", [Part, SendMessageResponse, StreamResponse, SecurityScheme, OAuthFlows]
)
def test_rejects_empty_oneof(cls: type) -> None:
    error = _rejected({}, cls)
    assert error.field_violations[0][0] == ""
    assert "exactly one" in error.message


def test_rejects_missing_required_field() -> None:
    error = _rejected(_without("message.messageId"))
    assert "missing" in _assert_names(error, "message.messageId")


def test_rejects_missing_required_message_field() -> None:
    error = _rejected({"configuration": {}})
    assert "missing" in _assert_names(error, "message")


def test_rejects_null_for_required_field() -> None:
    _assert_names(_rejected(_with("message.role", None)), "message.role")


def test_rejects_empty_required_string() -> None:
    _assert_names(_rejected(_with("message.messageId", "")), "message.messageId")


def test_rejects_empty_required_parts() -> None:
    error = _rejected(_with("message.parts", []))
    assert "non-empty" in _assert_names(error, "message.parts")


def test_rejects_empty_supported_interfaces() -> None:
    card = {
        "name": "a",
        "description": "b",
        "supportedInterfaces": [],
        "version": "1",
        "capabilities": {},
    }
    _assert_names(_rejected(card, AgentCard), "supportedInterfaces")


@pytest.mark.parametrize("top", [[], "x", 1, None, True])
def test_rejects_non_object_at_top_level(top: Any) -> None:
    error = _rejected(top)
    assert error.field_violations == (("", error.field_violations[0][1]),)
    assert "expected object" in error.message


def test_rejects_non_object_for_message_field() -> None:
    error = _rejected(_with("message", "hello"))
    assert "expected object" in _assert_names(error, "message")


def test_rejects_non_object_for_struct_field() -> None:
    error = _rejected(_with("message.metadata", ["a"]))
    assert "expected object" in _assert_names(error, "message.metadata")


def test_rejects_non_object_for_part() -> None:
    _assert_names(_rejected(_with("message.parts[0]", "hello")), "message.parts[0]")


@pytest.mark.parametrize(
    "stamp",
    [
        "yesterday",
        "2026-11-30",
        "2026-11-30T10:00:00",  # no offset
        "2026-11-30 10:00:00Z",  # space separator
        "2026-13-01T00:00:00Z",
        "2026-02-30T00:00:00Z",
        "2026-11-30T24:00:00Z",
        "2026-11-30T10:00:60Z",
        "2026-11-30T10:00:00+2400",
        "2026-11-30T10:00:00+24:00",
        "2026-11-30T10:00:00.Z",
        "0001-01-01T00:00:00+01:00",  # before year 1 once in UTC
        "\u0662\u0660\u0662\u0666-11-30T10:00:00Z",  # non-ASCII digits
        1764496800,
    ],
)
def test_rejects_invalid_timestamp(stamp: Any) -> None:
    data = {"id": "t", "status": {"state": "TASK_STATE_WORKING", "timestamp": stamp}}
    _assert_names(_rejected(data, Task), "status.timestamp")


@pytest.mark.parametrize(
    ("stamp", "expected"),
    [
        ("2026-11-30T10:00:00Z", datetime(2026, 11, 30, 10, tzinfo=UTC)),
        ("2026-11-30t10:00:00z", datetime(2026, 11, 30, 10, tzinfo=UTC)),
        ("2026-11-30T10:00:00.5Z", datetime(2026, 11, 30, 10, 0, 0, 500000, tzinfo=UTC)),
        ("2026-11-30T10:00:00.123456789Z", datetime(2026, 11, 30, 10, 0, 0, 123456, tzinfo=UTC)),
        ("2026-11-30T12:30:00+02:30", datetime(2026, 11, 30, 10, tzinfo=UTC)),
        ("2026-11-30T05:00:00-05:00", datetime(2026, 11, 30, 10, tzinfo=UTC)),
    ],
)
def test_accepts_offsets_and_any_fraction_normalised_to_utc(stamp: str, expected: datetime) -> None:
    request = decode({"statusTimestampAfter": stamp}, ListTasksRequest)
    assert request.status_timestamp_after == expected
    assert request.status_timestamp_after is not None
    assert request.status_timestamp_after.tzinfo is UTC


# --- null, bytes, JSON values, JSON text ---------------------------------------------------


def test_data_null_is_a_data_part_holding_null() -> None:
    part = decode({"data": None}, Part)
    assert part.kind == "data"
    assert part.data == DataValue(None)


def test_null_means_unset_for_other_fields() -> None:
    part = decode({"text": None, "url": "https://x", "filename": None, "metadata": None}, Part)
    assert part == Part.from_url("https://x")
    request = decode({**REQUEST, "configuration": None, "metadata": None}, SendMessageRequest)
    assert request.configuration is None
    assert request.metadata is None


@pytest.mark.parametrize("text", ["AAFieXRlcw==", "AAFieXRlcw", "-_8", "-_8="])
def test_accepts_urlsafe_and_unpadded_base64(text: str) -> None:
    assert decode({"raw": text}, Part).raw is not None


@pytest.mark.parametrize("text", ["A", "AAFie$Rlcw==", "AAFi eXRlcw==", "é", "AA==AA=="])
def test_rejects_invalid_base64(text: str) -> None:
    _assert_names(_rejected({"raw": text}, Part), "raw")


def test_rejects_non_json_values_inside_data() -> None:
    error = _rejected({"data": {"a": [1, float("nan")]}}, Part)
    _assert_names(error, 'data["a"][1]')


def test_rejects_lone_surrogates() -> None:
    _assert_names(_rejected({"text": "\ud800"}, Part), "text")


def test_map_paths_use_the_key() -> None:
    card = {
        "name": "a",
        "description": "b",
        "supportedInterfaces": [
            {"url": "u", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}
        ],
        "version": "1",
        "capabilities": {"streaming": "yes"},
        "securitySchemes": {"bearer": {"httpAuthSecurityScheme": {"scheme": 5}}},
    }
    error = _rejected(card, AgentCard)
    _assert_names(error, 'securitySchemes["bearer"].httpAuthSecurityScheme.scheme')
    _assert_names(error, "capabilities.streaming")


def test_path_prefix_is_applied() -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode({"historyLength": "3"}, SendMessageConfiguration, path="configuration")
    _assert_names(caught.value, "configuration.historyLength")


def test_reports_every_violation() -> None:
    doc = _with("message.role", 7)
    doc["message"]["parts"] = [{"text": 1}, {}]
    doc["configuration"]["historyLength"] = "x"
    found = [p for p, _ in _rejected(doc).field_violations]
    assert found == [
        "message.role",
        "message.parts[0].text",
        "message.parts[1]",
        "configuration.historyLength",
    ]


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (b"", "not valid JSON"),
        (b"{", "not valid JSON"),
        (b'{"text": "a", "text": "b"}', "duplicate"),
        (b'{"text": NaN}', "NaN"),
        (b"\xff{}", "UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ],
)
def test_decode_json_rejects_bad_text(raw: bytes, needle: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode_json(raw, Part)
    assert needle in caught.value.message


def test_decode_json_accepts_text_and_bytes() -> None:
    assert decode_json('{"text": "é"}', Part) == decode_json('{"text": "é"}'.encode(), Part)


def test_list_tasks_response_accepts_omitted_zero_required_fields() -> None:
    # ProtoJSON writers omit R fields at their zero value; those zeros are data here.
    assert decode({}, ListTasksResponse) == ListTasksResponse()


# --- the model enforces the same invariants from Python -----------------------------------


def test_part_constructors_and_kind() -> None:
    assert Part.from_text("a").kind == "text"
    assert Part.from_raw(b"").kind == "raw"
    assert Part.from_url("https://x", filename="f", media_type="text/plain").kind == "url"
    assert Part.from_data(None).kind == "data"
    assert Part.from_data(None).data == DataValue(None)
    assert Part.from_text("").text == ""


def test_part_needs_exactly_one_member() -> None:
    with pytest.raises(FieldError) as caught:
        Part()
    assert caught.value.field is None
    with pytest.raises(FieldError) as caught:
        Part(text="a", data=DataValue(None))
    assert caught.value.field == "data"


def test_every_oneof_is_checked_on_construction() -> None:
    with pytest.raises(FieldError):
        SendMessageResponse()
    with pytest.raises(FieldError):
        StreamResponse()
    with pytest.raises(FieldError):
        SecurityScheme()
    with pytest.raises(FieldError):
        OAuthFlows()
    with pytest.raises(FieldError) as caught:
        SecurityScheme(
            http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer"),
            mtls_security_scheme=MutualTlsSecurityScheme(),
        )
    assert caught.value.field == "mtls_security_scheme"


def test_required_fields_are_checked_on_construction() -> None:
    with pytest.raises(FieldError) as caught:
        Message(message_id="m", role=Role.ROLE_USER, parts=())
    assert caught.value.field == "parts"
    with pytest.raises(FieldError) as caught:
        Message(message_id="", role=Role.ROLE_USER, parts=(Part.from_text("a"),))
    assert caught.value.field == "message_id"
    with pytest.raises(FieldError):
        AgentCard(
            name="a",
            description="b",
            supported_interfaces=(),
            version="1",
            capabilities=AgentCapabilities(),
        )
    AgentInterface(url="u", protocol_binding="HTTP+JSON", protocol_version="1.0")


def test_plain_strings_treat_empty_as_unset() -> None:
    message = Message(
        message_id="m", context_id="", role=Role.ROLE_USER, parts=(Part.from_text("a"),)
    )
    assert message.context_id is None


def test_int32_is_checked_on_construction() -> None:
    with pytest.raises(FieldError):
        SendMessageConfiguration(history_length=2**31)


def test_timestamps_must_be_aware_and_become_utc() -> None:
    with pytest.raises(FieldError):
        TaskStatus(state=TaskState.TASK_STATE_WORKING, timestamp=datetime(2026, 1, 1))
    status = TaskStatus(
        state=TaskState.TASK_STATE_WORKING,
        timestamp=datetime(2026, 1, 1, 2, tzinfo=timezone(timedelta(hours=2))),
    )
    assert status.timestamp == datetime(2026, 1, 1, tzinfo=UTC)
    assert status.timestamp is not None
    assert status.timestamp.tzinfo is UTC
