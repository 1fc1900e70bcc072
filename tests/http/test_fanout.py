"""SSE fan-out: one encoding per published update, shared by every subscriber."""

from __future__ import annotations

import json

import trio

from taskplane.http.fanout import FrameEncoder
from taskplane.http.sse import sse_frame
from taskplane.http.streams import forward
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


async def test_frames_already_waiting_go_out_as_one_chunk_up_to_the_ending_one() -> None:
    encoder = FrameEncoder()
    tx, rx = trio.open_memory_channel[StreamResponse](8)
    states = (
        TaskState.TASK_STATE_SUBMITTED,
        TaskState.TASK_STATE_WORKING,
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_WORKING,  # after the end: never sent
    )
    frames = [update(state) for state in states]
    for frame in frames:
        tx.send_nowait(frame)
    open_streams = {rx}
    chunks = [
        c async for c in forward(rx, encoder, stop_when_interrupted=False, streams=open_streams)
    ]
    assert chunks == [b"".join(encoder(f) for f in frames[:3])]
    assert not open_streams  # forgotten once ended


async def test_a_lone_frame_is_its_shared_bytes_and_a_dropped_stream_ends_with_an_error() -> None:
    encoder = FrameEncoder()
    tx, rx = trio.open_memory_channel[StreamResponse](8)
    working = update(TaskState.TASK_STATE_WORKING)
    tx.send_nowait(working)
    tx.close()  # the owner dropped this subscriber after one frame
    chunks = [c async for c in forward(rx, encoder, stop_when_interrupted=False)]
    assert chunks[0] is encoder(working)
    assert len(chunks) == 2 and chunks[1].startswith(b"event: error\ndata: ")
    assert json.loads(chunks[1].split(b"data: ", 1)[1])["error"]["status"] == "UNAVAILABLE"
