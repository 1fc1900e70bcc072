"""The JSON-RPC binding's framing: SSE frames rewrapped, error codes (pure)."""

from __future__ import annotations

import json

import pytest

from taskplane.errors import (
    DuplicateMessageId,
    Internal,
    InvalidRequest,
    Overloaded,
    PayloadTooLarge,
    TaskNotFound,
    Unauthenticated,
    VersionNotSupported,
)
from taskplane.http import jsonrpc
from taskplane.http.errors import error_body
from taskplane.http.sse import sse_comment, sse_error_frame, sse_frame


async def _chunks(*chunks: bytes):  # type: ignore[no-untyped-def]
    for chunk in chunks:
        yield chunk


async def test_each_frame_becomes_a_json_rpc_response() -> None:
    task = sse_frame({"task": {"id": "t"}})
    update = sse_frame({"statusUpdate": {"taskId": "t"}})
    error = sse_error_frame(error_body(Overloaded("shutting down")))
    out = [
        chunk
        async for chunk in jsonrpc.rpc_frames(
            _chunks(task + update, sse_comment("keep-alive"), error), "s-1"
        )
    ]
    assert out[1] == b": keep-alive\n\n"
    events = [e for e in b"".join(out).split(b"\n\n") if e.startswith(b"data: ")]
    frames = [json.loads(e[len(b"data: ") :]) for e in events]
    assert frames[0] == {"jsonrpc": "2.0", "id": "s-1", "result": {"task": {"id": "t"}}}
    assert frames[1]["result"] == {"statusUpdate": {"taskId": "t"}}
    assert frames[2]["id"] == "s-1" and "result" not in frames[2]
    assert frames[2]["error"]["code"] == jsonrpc.SERVER_ERROR
    assert frames[2]["error"]["data"][0]["reason"] == "UNAVAILABLE"


@pytest.mark.parametrize(
    ("error", "code", "status"),
    [
        (TaskNotFound("x"), -32001, 200),
        (VersionNotSupported("x"), -32009, 200),
        (InvalidRequest("x"), -32602, 200),
        (Internal("x"), -32603, 200),
        (DuplicateMessageId("x"), -32000, 200),
        (PayloadTooLarge("x"), -32600, 413),
        (Unauthenticated("x"), -32000, 401),
        (Overloaded("x"), -32000, 503),
        (jsonrpc.ParseError("x"), -32700, 200),
        (jsonrpc.MethodNotFound("x"), -32601, 200),
    ],
)
def test_error_codes_and_http_statuses(error: Exception, code: int, status: int) -> None:
    assert isinstance(error, jsonrpc.TaskplaneError)
    payload = json.loads(jsonrpc.error_payload(7, error))
    assert payload["id"] == 7 and payload["error"]["code"] == code
    assert payload["error"]["data"] == error_body(error)["error"]["details"]
    assert jsonrpc.http_status(error) == status
