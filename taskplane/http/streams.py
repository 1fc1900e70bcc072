"""SSE frame generators for the handlers: forwarding a subscription until it ends.

A stream ends when its Task is terminal (or interrupted, for ``message:stream``), with
an error frame when the owner dropped it (it fell behind, or restarted) and with an
``UNAVAILABLE`` frame when the server shuts down (its channel is closed under it).
"""

from __future__ import annotations

import math
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

import trio

from taskplane.errors import ActorGone, Overloaded
from taskplane.http.errors import error_body
from taskplane.http.fanout import FrameEncoder
from taskplane.http.sse import sse_comment, sse_error_frame
from taskplane.model.types import StreamResponse

KEEPALIVE_S = 15.0
"""Seconds of silence after which an SSE stream gets a ``:`` comment line."""


async def nothing() -> AsyncGenerator[bytes, None]:
    return
    yield  # pragma: no cover  (makes this an async generator)


async def once(frame: bytes) -> AsyncGenerator[bytes, None]:
    yield frame


async def forward(
    frames: trio.MemoryReceiveChannel[StreamResponse],
    encode_frame: FrameEncoder,
    *,
    stop_when_interrupted: bool,
    first: StreamResponse | None = None,
) -> AsyncGenerator[bytes, None]:
    """SSE bytes for ``frames`` until the Task ends (or pauses, for message:stream).

    Each update is encoded once for all its subscribers (``encode_frame``).

    If the owner drops this subscriber for falling behind, the stream ends with a
    ``data: {"error": ...}`` frame telling the client to re-read
    the Task and subscribe again.
    """
    with frames:
        pending = [first] if first is not None else []
        while True:
            frame: StreamResponse | None = pending.pop() if pending else None
            if frame is None:
                with trio.move_on_after(KEEPALIVE_S if KEEPALIVE_S > 0 else math.inf) as idle:
                    try:
                        frame = await frames.receive()
                    except trio.ClosedResourceError:  # Handlers.stop(): shutdown
                        stopping = Overloaded(
                            "the server is shutting down; read the task with GET "
                            "/tasks/{id} and subscribe again once it is back"
                        )
                        yield sse_error_frame(error_body(stopping))
                        return
                    except trio.EndOfChannel:
                        error = ActorGone(
                            "this stream was interrupted (it fell behind, or the task's "
                            "owner restarted); read the task with GET /tasks/{id}, then "
                            "subscribe again"
                        )
                        yield sse_error_frame(error_body(error))
                        return
                if idle.cancelled_caught:
                    yield sse_comment("keep-alive")
                    continue
            assert frame is not None
            yield encode_frame(frame)
            state = _state(frame)
            if state is not None and (
                state.is_terminal or (stop_when_interrupted and state.is_interrupted)
            ):
                return


async def untracked(
    frames: AsyncGenerator[bytes, None],
    channel: trio.MemoryReceiveChannel[StreamResponse],
    streams: set[trio.MemoryReceiveChannel[StreamResponse]],
) -> AsyncGenerator[bytes, None]:
    """``frames``, forgetting ``channel`` in ``streams`` when the stream ends."""
    try:
        async with aclosing(frames):
            async for chunk in frames:
                yield chunk
    finally:
        streams.discard(channel)


def _state(frame: StreamResponse) -> Any:
    if frame.task is not None:
        return frame.task.status.state
    if frame.status_update is not None:
        return frame.status_update.status.state
    return None
