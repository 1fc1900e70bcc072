"""Tolerant decoding of requests (A2A v1.0.1 §5.7, rule "unknown fields are ignored"):
``decode_request`` ignores unknown keys and names them, takes proto field names for
JSON names, and refuses everything else that ``decode`` refuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from taskplane.errors import InvalidRequest
from taskplane.model.codec import decode, decode_request
from taskplane.model.requests import SendMessageRequest
from taskplane.model.types import Message

VECTORS = Path(__file__).parent / "vectors"


def _request(**message: Any) -> dict[str, Any]:
    return {
        "message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}], **message}
    }


def test_a_request_without_unknown_keys_is_decoded_as_strictly() -> None:
    decoded = decode_request(_request(), SendMessageRequest)
    assert decoded.value == decode(_request(), SendMessageRequest)
    assert decoded.ignored == ()


def test_unknown_keys_are_ignored_and_named_at_every_depth() -> None:
    doc = _request(bogus=1, parts=[{"text": "hi", "zzz": True}])
    doc["configuration"] = {"historyLength": 2, "newer": {}}
    doc["top"] = 1
    decoded = decode_request(doc, SendMessageRequest)
    assert decoded.value.message.parts[0].text == "hi"
    assert decoded.value.configuration is not None
    assert decoded.value.configuration.history_length == 2
    assert decoded.ignored == (
        "message.parts[0].zzz",
        "message.bogus",
        "configuration.newer",
        "top",
    )
    with pytest.raises(InvalidRequest):  # the strict reading still refuses them
        decode(doc, SendMessageRequest)


def test_proto_field_names_stand_for_json_names_and_are_not_unknown() -> None:
    doc = {"message": {"message_id": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}
    doc["configuration"] = {"history_length": 4, "historyLength": None}
    decoded = decode_request(doc, SendMessageRequest)
    assert decoded.value.message.message_id == "m-1"
    assert decoded.value.configuration is not None
    assert decoded.value.configuration.history_length == 4
    assert decoded.ignored == ()


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ({"taskId": 7}, "message.taskId"),  # wrong type
        ({"role": "ROLE_NOPE"}, "message.role"),  # bad enum value
        ({"role": 1}, "message.role"),  # enum number
        ({"parts": []}, "message.parts"),  # empty REQUIRED array
        ({"messageId": ""}, "message.messageId"),  # empty REQUIRED string
    ],
)
def test_every_other_misfit_is_still_refused(message: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        decode_request(_request(bogus=1, **message), SendMessageRequest)
    assert [path for path, _ in refused.value.field_violations] == [field]


def test_a_missing_required_field_is_still_refused() -> None:
    doc = _request(bogus=1)
    del doc["message"]["messageId"]
    with pytest.raises(InvalidRequest) as refused:
        decode_request(doc, SendMessageRequest)
    assert [path for path, _ in refused.value.field_violations] == ["message.messageId"]


def test_the_unknown_field_vector_is_refused_only_for_its_empty_parts() -> None:
    # The vector's reference parser refuses "bogus"; tolerantly, only "parts" is wrong.
    vector = json.loads((VECTORS / "invalid" / "unknown_field.json").read_text("utf-8"))
    assert vector["type"] == "Message"
    with pytest.raises(InvalidRequest) as refused:
        decode_request(vector["json"], Message)
    assert [path for path, _ in refused.value.field_violations] == ["parts"]
