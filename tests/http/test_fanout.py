"""SSE fan-out: one encoding per published update, shared by every subscriber."""

from __future__ import annotations

import json

from taskplane.http.fanout import FrameEncoder
from taskplane.http.sse import sse_frame
from taskplane.model.codec import encode
from taskplane.model.enums import TaskState
from taskplane.model.types import StreamResponse, Task, TaskStatus, TaskStatusUpdateEvent


def update(state: TaskState) -> StreamResponse:
    return StreamResponse(
        status_update=TaskStatusUpdateEvent(
            task_id="t-1", context_id="c-1", status=TaskStatus(state=state)
        )
    )


def test_an_update_is_encoded_once_and_its_bytes_shared() -> None:
    encoder = FrameEncoder()
    frame = update(TaskState.TASK_STATE_WORKING)
    first = encoder(frame)
    assert first == sse_frame(encode(frame))
    assert all(encoder(frame) is first for _ in range(1000))  # the same bytes object
    assert json.loads(first[len(b"data: ") :])["statusUpdate"]["status"]["state"] == (
        "TASK_STATE_WORKING"
    )


def test_equal_but_distinct_updates_and_snapshots_are_encoded_on_their_own() -> None:
    encoder = FrameEncoder()
    a, b = update(TaskState.TASK_STATE_WORKING), update(TaskState.TASK_STATE_WORKING)
    assert encoder(a) == encoder(b) and encoder(a) is not encoder(b)
    snapshot = StreamResponse(
        task=Task(id="t-1", context_id="c-1", status=TaskStatus(state=TaskState.TASK_STATE_WORKING))
    )
    assert encoder(snapshot) == sse_frame(encode(snapshot))
    assert encoder(snapshot) is not encoder(snapshot)  # per-subscriber: not remembered


def test_forgotten_updates_are_encoded_again_correctly() -> None:
    encoder = FrameEncoder(size=2)
    frames = [
        update(state)
        for state in (
            TaskState.TASK_STATE_SUBMITTED,
            TaskState.TASK_STATE_WORKING,
            TaskState.TASK_STATE_COMPLETED,
        )
    ]
    encoded = [encoder(f) for f in frames]
    again = encoder(frames[0])  # evicted by the third: encoded anew
    assert again == encoded[0] and again is not encoded[0]
    assert encoder(frames[2]) is encoded[2]
