"""A2A 0.3 compatibility: the translation both ways, on golden examples (pure)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from taskplane.errors import InvalidRequest, VersionNotSupported
from taskplane.http import compat03, jsonrpc
from taskplane.http.card import agent_card_json
from taskplane.http.negotiation import check_version
from taskplane.http.sse import sse_comment, sse_frame

MESSAGE_03: dict[str, Any] = {
    "kind": "message",
    "messageId": "m-1",
    "role": "user",
    "contextId": "c-1",
    "taskId": "t-1",
    "parts": [
        {"kind": "text", "text": "hello", "metadata": {"k": 1}},
        {"kind": "file", "file": {"bytes": "aGk=", "mimeType": "text/plain", "name": "a.txt"}},
        {"kind": "file", "file": {"uri": "https://x.example/f.png", "mimeType": "image/png"}},
        {"kind": "data", "data": {"answer": 42}},
    ],
    "metadata": {"m": True},
    "referenceTaskIds": ["t-0"],
}
MESSAGE_10: dict[str, Any] = {
    "messageId": "m-1",
    "role": "ROLE_USER",
    "contextId": "c-1",
    "taskId": "t-1",
    "parts": [
        {"text": "hello", "metadata": {"k": 1}},
        {"raw": "aGk=", "mediaType": "text/plain", "filename": "a.txt"},
        {"url": "https://x.example/f.png", "mediaType": "image/png"},
        {"data": {"answer": 42}},
    ],
    "metadata": {"m": True},
    "referenceTaskIds": ["t-0"],
}
TASK_10: dict[str, Any] = {
    "id": "t-1",
    "contextId": "c-1",
    "status": {
        "state": "TASK_STATE_INPUT_REQUIRED",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "message": {"messageId": "a-1", "role": "ROLE_AGENT", "parts": [{"text": "which?"}]},
    },
    "artifacts": [{"artifactId": "r", "name": "response", "parts": [{"text": "out"}]}],
    "history": [{"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "ask"}]}],
}
TASK_03: dict[str, Any] = {
    "kind": "task",
    "id": "t-1",
    "contextId": "c-1",
    "status": {
        "state": "input-required",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "message": {
            "kind": "message",
            "messageId": "a-1",
            "role": "agent",
            "parts": [{"kind": "text", "text": "which?"}],
        },
    },
    "artifacts": [
        {"artifactId": "r", "name": "response", "parts": [{"kind": "text", "text": "out"}]}
    ],
    "history": [
        {
            "kind": "message",
            "messageId": "m-1",
            "role": "user",
            "parts": [{"kind": "text", "text": "ask"}],
        }
    ],
}


def test_a_03_message_send_becomes_the_10_send_message() -> None:
    document = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "message/send",
        "params": {
            "message": MESSAGE_03,
            "configuration": {"acceptedOutputModes": ["text/plain"], "blocking": False},
            "metadata": {"x": 1},
        },
    }
    assert compat03.request_document(document) == {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "SendMessage",
        "params": {
            "message": MESSAGE_10,
            "configuration": {"acceptedOutputModes": ["text/plain"], "returnImmediately": True},
            "metadata": {"x": 1},
        },
    }


def test_blocking_true_is_the_10_default() -> None:
    params = {"message": MESSAGE_03, "configuration": {"blocking": True, "historyLength": 2}}
    out = compat03.request_params("SendStreamingMessage", params)
    assert out["configuration"] == {"historyLength": 2}


@pytest.mark.parametrize(
    ("method", "params", "v1_method", "v1_params"),
    [
        ("tasks/get", {"id": "t", "historyLength": 1, "metadata": {}}, "GetTask",
         {"id": "t", "historyLength": 1}),
        ("tasks/cancel", {"id": "t", "metadata": {"a": 1}}, "CancelTask",
         {"id": "t", "metadata": {"a": 1}}),
        ("tasks/resubscribe", {"id": "t"}, "SubscribeToTask", {"id": "t"}),
        ("tasks/pushNotificationConfig/set",
         {"taskId": "t", "pushNotificationConfig": {
             "url": "https://h.example/cb", "token": "k",
             "authentication": {"schemes": ["Bearer"], "credentials": "c"}}},
         "CreateTaskPushNotificationConfig",
         {"taskId": "t", "url": "https://h.example/cb", "token": "k",
          "authentication": {"scheme": "Bearer", "credentials": "c"}}),
        ("tasks/pushNotificationConfig/get", {"id": "t", "pushNotificationConfigId": "p"},
         "GetTaskPushNotificationConfig", {"taskId": "t", "id": "p"}),
        ("tasks/pushNotificationConfig/list", {"id": "t"},
         "ListTaskPushNotificationConfigs", {"taskId": "t"}),
        ("tasks/pushNotificationConfig/delete", {"id": "t", "pushNotificationConfigId": "p"},
         "DeleteTaskPushNotificationConfig", {"taskId": "t", "id": "p"}),
        ("agent/getAuthenticatedExtendedCard", {}, "GetExtendedAgentCard", {}),
    ],
)  # fmt: skip
def test_each_03_method_is_its_10_method(
    method: str, params: dict[str, Any], v1_method: str, v1_params: dict[str, Any]
) -> None:
    document = {"jsonrpc": "2.0", "id": "x", "method": method, "params": params}
    translated = compat03.request_document(document)
    assert translated["method"] == v1_method
    assert translated["params"] == v1_params
    assert jsonrpc.parse_envelope(translated).method == v1_method


def test_a_10_method_name_is_recognised_and_an_unknown_one_is_not_found() -> None:
    assert compat03.names_v1_method({"method": "SendMessage"})
    assert not compat03.names_v1_method({"method": "message/send"})
    with pytest.raises(jsonrpc.MethodNotFound, match=r"A2A 0\.3"):
        compat03.request_document({"jsonrpc": "2.0", "id": 1, "method": "tasks/list"})
    assert compat03.request_document([1]) == [1]  # a batch: parse_envelope refuses it


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ({**MESSAGE_03, "role": "ROLE_USER"}, "message.role"),
        ({**MESSAGE_03, "parts": [{"kind": "video"}]}, "message.parts[0].kind"),
        ({**MESSAGE_03, "parts": [{"kind": "file", "file": {}}]}, "message.parts[0].file"),
    ],
)
def test_a_03_message_that_is_not_03_is_invalid(message: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidRequest) as raised:
        compat03.message_to_v1(message)
    assert [path for path, _ in raised.value.field_violations] == [field]


def test_the_10_message_is_the_03_one_back() -> None:
    assert compat03.message_to_v03(MESSAGE_10) == MESSAGE_03
    assert compat03.message_to_v1(MESSAGE_03) == MESSAGE_10


def test_a_10_task_is_a_03_task() -> None:
    assert compat03.task_to_v03(TASK_10) == TASK_03
    assert compat03.result("SendMessage", {"task": TASK_10}) == TASK_03
    assert compat03.result("GetTask", TASK_10) == TASK_03
    assert compat03.result("CancelTask", TASK_10) == TASK_03


def test_a_direct_reply_is_a_03_message() -> None:
    reply = {"messageId": "a", "role": "ROLE_AGENT", "parts": [{"text": "pong"}]}
    assert compat03.result("SendMessage", {"message": reply}) == {
        "kind": "message",
        "messageId": "a",
        "role": "agent",
        "parts": [{"kind": "text", "text": "pong"}],
    }


def test_a_non_object_data_part_is_wrapped_for_03() -> None:
    reply = {"messageId": "a", "role": "ROLE_AGENT", "parts": [{"data": [1, 2]}]}
    assert compat03.message_to_v03(reply)["parts"] == [{"kind": "data", "data": {"value": [1, 2]}}]


@pytest.mark.parametrize(
    ("state", "state_03", "final"),
    [
        ("TASK_STATE_WORKING", "working", False),
        ("TASK_STATE_SUBMITTED", "submitted", False),
        ("TASK_STATE_COMPLETED", "completed", True),
        ("TASK_STATE_INPUT_REQUIRED", "input-required", True),
        ("TASK_STATE_AUTH_REQUIRED", "auth-required", True),
        ("TASK_STATE_CANCELED", "canceled", True),
        ("TASK_STATE_UNSPECIFIED", "unknown", False),
    ],
)
def test_a_status_update_is_a_03_status_update(state: str, state_03: str, final: bool) -> None:
    update = {"taskId": "t", "contextId": "c", "status": {"state": state}}
    assert compat03.stream_event({"statusUpdate": update}) == {
        "kind": "status-update",
        "taskId": "t",
        "contextId": "c",
        "status": {"state": state_03},
        "final": final,
    }


def test_an_artifact_update_is_a_03_artifact_update() -> None:
    update = {
        "taskId": "t",
        "contextId": "c",
        "artifact": {"artifactId": "r", "parts": [{"text": "x"}]},
        "lastChunk": True,
    }
    assert compat03.stream_event({"artifactUpdate": update}) == {
        "kind": "artifact-update",
        "taskId": "t",
        "contextId": "c",
        "artifact": {"artifactId": "r", "parts": [{"kind": "text", "text": "x"}]},
        "lastChunk": True,
    }


def test_push_config_results_are_03_shapes() -> None:
    config = {"taskId": "t", "id": "p", "url": "https://h.example/cb",
              "authentication": {"scheme": "Bearer"}}  # fmt: skip
    expected = {
        "taskId": "t",
        "pushNotificationConfig": {
            "id": "p",
            "url": "https://h.example/cb",
            "authentication": {"schemes": ["Bearer"]},
        },
    }
    assert compat03.result("GetTaskPushNotificationConfig", config) == expected
    assert compat03.result("ListTaskPushNotificationConfigs", {"configs": [config]}) == [expected]
    assert compat03.result("DeleteTaskPushNotificationConfig", {}) is None


async def _chunks(*chunks: bytes):  # type: ignore[no-untyped-def]
    for chunk in chunks:
        yield chunk


async def test_sse_frames_carry_03_events_and_errors_as_they_are() -> None:
    update = {"taskId": "t", "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"}}
    error = {"jsonrpc": "2.0", "id": 5, "error": {"code": -32000, "message": "x", "data": []}}
    v1 = jsonrpc.rpc_frames(
        _chunks(sse_frame({"task": TASK_10}) + sse_frame({"statusUpdate": update})), 5
    )
    rewrapped = [chunk async for chunk in compat03.frames(v1)]
    events = [json.loads(e[len(b"data: ") :]) for e in b"".join(rewrapped).split(b"\n\n") if e]
    assert events[0] == {"jsonrpc": "2.0", "id": 5, "result": TASK_03}
    assert events[1]["result"]["kind"] == "status-update"
    assert events[1]["result"]["final"] is True
    passed = [c async for c in compat03.frames(_chunks(sse_frame(error), sse_comment("k")))]
    assert passed == [_compact_frame(error), sse_comment("k")]


def _compact_frame(value: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(value, separators=(",", ":")).encode() + b"\n\n"


def test_the_card_has_the_03_fields_beside_the_10_ones() -> None:
    card = agent_card_json(
        public_url="https://agents.example", name="n", description="d", version="1.2.3"
    )
    both = compat03.card(card)
    assert {k: v for k, v in both.items() if k in card} == {
        **card,
        "securitySchemes": both["securitySchemes"],
    }
    assert both["protocolVersion"] == "0.3.0"
    assert both["url"] == "https://agents.example"
    assert both["preferredTransport"] == "JSONRPC"
    assert both["additionalInterfaces"] == [
        {"url": "https://agents.example", "transport": "JSONRPC"},
        {"url": "https://agents.example", "transport": "HTTP+JSON"},
    ]
    assert both["security"] == [{"bearer": []}]
    bearer = both["securitySchemes"]["bearer"]
    assert (
        bearer["httpAuthSecurityScheme"]
        == card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]
    )
    assert bearer["type"] == "http" and bearer["scheme"].lower() == "bearer"
    assert both["supportsAuthenticatedExtendedCard"] is False


@pytest.mark.parametrize(
    ("header", "query", "served"),
    [(None, None, "0.3"), ("", None, "0.3"), ("0.3", None, "0.3"), ("0.3.1", None, "0.3"),
     ("1.0", None, "1.0"), (None, "1.0", "1.0"), ("1.0.2", None, "1.0")],
)  # fmt: skip
def test_with_compat_an_absent_version_is_03(
    header: str | None, query: str | None, served: str
) -> None:
    assert check_version(header, query, compat03=True) == served


@pytest.mark.parametrize("header", [None, "", "1.0"])
def test_without_compat_an_absent_version_is_still_10(header: str | None) -> None:
    assert check_version(header, None) == "1.0"


def test_without_compat_03_is_not_supported() -> None:
    with pytest.raises(VersionNotSupported) as raised:
        check_version("0.3", None)
    assert raised.value.metadata == {"supportedVersions": "1.0"}
    with pytest.raises(VersionNotSupported) as raised:
        check_version("0.2", None, compat03=True)
    assert raised.value.metadata == {"supportedVersions": "1.0, 0.3"}
