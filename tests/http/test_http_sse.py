"""http/sse.py: SSE framing (digest D8)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from taskplane.errors import Internal
from taskplane.http.errors import error_body
from taskplane.http.sse import sse_comment, sse_frame, sse_headers


def _data_lines(stream: bytes) -> list[object]:
    # The TCK's way of reading a stream: every "data:" line is one JSON document.
    return [
        json.loads(line[len("data:") :])
        for line in stream.decode("utf-8").splitlines()
        if line.startswith("data:")
    ]


def test_frame_is_one_compact_data_line() -> None:
    payload = {"task": {"id": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_WORKING"}}}
    frame = sse_frame(payload)
    assert frame == (
        b'data: {"task":{"id":"t1","contextId":"c1","status":{"state":"TASK_STATE_WORKING"}}}\n\n'
    )


# Every character str.splitlines (and so httpx iter_lines) treats as a line break.
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def test_line_breaks_inside_strings_stay_escaped() -> None:
    payload = {"message": {"parts": [{"text": f"a{LINE_BREAKS}b\x00"}]}}
    frame = sse_frame(payload)
    assert frame.endswith(b"\n\n")
    assert frame.decode("ascii").splitlines()[1:] == [""]  # one line, then the blank one
    assert _data_lines(frame) == [payload]


def test_frame_is_pure_ascii() -> None:
    payload = {"text": "h\u00e9 \U0001f600"}
    frame = sse_frame(payload)
    assert frame.isascii()
    assert _data_lines(frame) == [payload]


def test_several_frames_parse_back_in_order() -> None:
    events: list[dict[str, Any]] = [
        {"task": {"id": "t"}},
        {"statusUpdate": {"taskId": "t"}},
        {"artifactUpdate": {}},
    ]
    stream = b"".join(sse_frame(e) for e in events) + sse_comment("keep-alive")
    assert _data_lines(stream) == events


def test_error_frame_after_events() -> None:
    frame = sse_frame(error_body(Internal("boom")))
    assert _data_lines(frame) == [error_body(Internal("boom"))]


def test_frame_refuses_nan() -> None:
    with pytest.raises(ValueError):
        sse_frame({"x": float("nan")})


def test_comment() -> None:
    assert sse_comment("keep-alive") == b": keep-alive\n\n"
    assert sse_comment() == b":\n\n"
    assert _data_lines(sse_comment("data: fake")) == []


@pytest.mark.parametrize("text", [*LINE_BREAKS, "a\nb", "\u00e9", "\t"])
def test_comment_must_be_one_line(text: str) -> None:
    with pytest.raises(ValueError):
        sse_comment(text)


def test_headers() -> None:
    headers = sse_headers()
    assert headers == {
        "Content-Type": "text/event-stream",
        "Cache-Control": "no-cache",
        "X-Accel-Buffering": "no",
    }
    headers["Content-Type"] = "changed"
    assert sse_headers()["Content-Type"] == "text/event-stream"


def test_an_error_frame_is_typed_for_event_clients_and_still_one_data_line() -> None:
    from taskplane.http.sse import sse_error_frame

    frame = sse_error_frame({"error": {"code": 503}})
    assert frame == b'event: error\ndata: {"error":{"code":503}}\n\n'
