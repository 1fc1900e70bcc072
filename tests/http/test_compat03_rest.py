"""The 0.3 HTTP+JSON translation (:mod:`taskplane.http.compat03_rest`): golden examples
of each direction, pure (no app)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

from taskplane.errors import InvalidRequest
from taskplane.http import compat03_rest


def test_a_03_send_request_becomes_the_10_send_body() -> None:
    body = {
        "message": {
            "messageId": "m-1",
            "contextId": "c-1",
            "role": "ROLE_USER",
            "content": [
                {"text": "hello", "metadata": {"k": 1}},
                {"file": {"fileWithUri": "https://x/a.png", "mimeType": "image/png", "name": "a"}},
                {"file": {"fileWithBytes": "AAE=", "mimeType": "application/octet-stream"}},
                {"data": {"data": {"answer": 42}}},
            ],
        },
        "configuration": {
            "acceptedOutputModes": ["text/plain"],
            "historyLength": 2,
            "blocking": False,
            "pushNotification": {"id": "p", "url": "https://hook"},
        },
        "metadata": {"trace": "t"},
    }
    assert compat03_rest.send_body(body) == {
        "message": {
            "messageId": "m-1",
            "contextId": "c-1",
            "role": "ROLE_USER",
            "parts": [
                {"text": "hello", "metadata": {"k": 1}},
                {"url": "https://x/a.png", "mediaType": "image/png", "filename": "a"},
                {"raw": "AAE=", "mediaType": "application/octet-stream"},
                {"data": {"answer": 42}},
            ],
        },
        "configuration": {
            "acceptedOutputModes": ["text/plain"],
            "historyLength": 2,
            "returnImmediately": True,
            "taskPushNotificationConfig": {"id": "p", "url": "https://hook"},
        },
        "metadata": {"trace": "t"},
    }


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"message": "hello"},
        {"message": {"messageId": "m", "role": "ROLE_USER", "content": [{"video": {}}]}},
        {"message": {"messageId": "m", "role": "ROLE_USER", "content": ["hello"]}},
        {"message": {"messageId": "m", "role": "ROLE_ROBOT", "content": [{"text": "x"}]}},
    ],
)
def test_a_03_send_request_that_is_not_03_is_invalid(body: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequest):
        compat03_rest.send_body(body)


TASK_10 = {
    "id": "t-1",
    "contextId": "c-1",
    "status": {
        "state": "TASK_STATE_CANCELED",
        "timestamp": "2026-12-01T00:00:00Z",
        "message": {
            "messageId": "a-1",
            "role": "ROLE_AGENT",
            "parts": [{"text": "bye"}],
            "referenceTaskIds": ["t-0"],
        },
    },
    "artifacts": [{"artifactId": "r", "name": "response", "parts": [{"data": [1, 2]}]}],
    "history": [{"messageId": "m-1", "role": "ROLE_USER", "parts": [{"raw": "AAE="}]}],
}
TASK_03 = {
    "id": "t-1",
    "contextId": "c-1",
    "status": {
        "state": "TASK_STATE_CANCELLED",
        "message": {"messageId": "a-1", "role": "ROLE_AGENT", "content": [{"text": "bye"}]},
        "timestamp": "2026-12-01T00:00:00Z",
    },
    "artifacts": [
        {"artifactId": "r", "name": "response", "parts": [{"data": {"data": {"value": [1, 2]}}}]}
    ],
    "history": [
        {"messageId": "m-1", "role": "ROLE_USER", "content": [{"file": {"fileWithBytes": "AAE="}}]}
    ],
}


def test_a_10_task_is_the_03_protobuf_task() -> None:
    assert compat03_rest.result("get", TASK_10) == TASK_03
    assert compat03_rest.result("cancel", TASK_10) == TASK_03
    assert compat03_rest.result("send", {"task": TASK_10}) == {"task": TASK_03}


def test_a_direct_reply_is_the_03_message() -> None:
    reply = {"messageId": "a", "role": "ROLE_AGENT", "parts": [{"text": "pong"}], "taskId": "t"}
    assert compat03_rest.result("send", {"message": reply}) == {
        "message": {
            "messageId": "a",
            "taskId": "t",
            "role": "ROLE_AGENT",
            "content": [{"text": "pong"}],
        }
    }


@pytest.mark.parametrize(
    ("state", "state_03", "final"),
    [
        ("TASK_STATE_WORKING", "TASK_STATE_WORKING", False),
        ("TASK_STATE_INPUT_REQUIRED", "TASK_STATE_INPUT_REQUIRED", True),
        ("TASK_STATE_COMPLETED", "TASK_STATE_COMPLETED", True),
    ],
)
def test_stream_events_are_03_stream_responses(state: str, state_03: str, final: bool) -> None:
    update = {"taskId": "t", "contextId": "c", "status": {"state": state}}
    assert compat03_rest.response({"statusUpdate": update}) == {
        "statusUpdate": {
            "taskId": "t",
            "contextId": "c",
            "final": final,
            "status": {"state": state_03},
        }
    }
    artifact = {
        "taskId": "t",
        "contextId": "c",
        "append": True,
        "lastChunk": False,
        "artifact": {"artifactId": "a", "parts": [{"text": "x"}]},
    }
    assert compat03_rest.response({"artifactUpdate": artifact}) == {
        "artifactUpdate": {**artifact, "artifact": {"artifactId": "a", "parts": [{"text": "x"}]}}
    }


def test_push_configs_are_03_protobuf_shapes() -> None:
    config = {
        "taskId": "t",
        "id": "p",
        "url": "https://hook",
        "authentication": {"scheme": "Bearer", "credentials": "s"},
    }
    expected = {
        "name": "tasks/t/pushNotificationConfigs/p",
        "pushNotificationConfig": {
            "id": "p",
            "url": "https://hook",
            "authentication": {"schemes": ["Bearer"], "credentials": "s"},
        },
    }
    assert compat03_rest.result("push", config) == expected
    assert compat03_rest.result("push", {"configs": [config]}) == {"configs": [expected]}
    assert compat03_rest.result("push", {}) == {}
    create = {
        "parent": "tasks/t",
        "configId": "p",
        "config": {
            "name": "tasks/t/pushNotificationConfigs/p",
            "pushNotificationConfig": expected["pushNotificationConfig"],
        },
    }
    assert compat03_rest.push_config_body("t", create) == config


async def test_sse_frames_carry_03_stream_responses_and_errors_as_they_are() -> None:
    error = {"error": {"code": 404, "status": "NOT_FOUND", "message": "gone"}}

    async def frames() -> AsyncIterator[bytes]:
        yield b": keep-alive\n\n"
        yield b"data: " + json.dumps({"task": TASK_10}).encode() + b"\n\n"
        yield b"data: " + json.dumps(error).encode() + b"\n\n"
        await trio.lowlevel.checkpoint()

    out = [chunk async for chunk in compat03_rest.frames(frames())]
    assert out[0] == b": keep-alive\n\n"
    assert json.loads(out[1][len(b"data: ") :]) == {"task": TASK_03}
    assert json.loads(out[2][len(b"data: ") :]) == error


def test_a_configuration_without_blocking_is_non_blocking_and_none_blocks() -> None:
    message = {"messageId": "m", "role": "ROLE_USER", "content": [{"text": "x"}]}
    unwritten = compat03_rest.send_body({"message": message, "configuration": {}})
    assert unwritten["configuration"] == {"returnImmediately": True}  # proto3's false
    blocking = compat03_rest.send_body({"message": message, "configuration": {"blocking": True}})
    assert blocking["configuration"] == {}
    assert "configuration" not in compat03_rest.send_body({"message": message})
