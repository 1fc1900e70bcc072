"""SSE frame generators: forwarding a subscription until it ends, and guarding a
stream once its response has begun.

A stream ends when its Task is terminal (or interrupted, for ``message:stream``), with
an error frame when the owner dropped it (it fell behind, or restarted) and with an
``UNAVAILABLE`` frame when the server shuts down (its channel is closed under it).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing

import trio

from taskplane.errors import ActorGone, Internal, Overloaded, TaskplaneError
from taskplane.http.access import Exchange
from taskplane.http.errors import error_body
from taskplane.http.fanout import FrameEncoder
from taskplane.http.metrics import Metrics
from taskplane.http.sse import sse_comment, sse_error_frame
from taskplane.model.enums import TaskState
from taskplane.model.types import StreamResponse

log = logging.getLogger("taskplane.http")

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
    streams: set[trio.MemoryReceiveChannel[StreamResponse]] | None = None,
) -> AsyncGenerator[bytes, None]:
    """SSE bytes for ``frames`` until the Task ends (or pauses, for message:stream).

    Each update is encoded once for all its subscribers (``encode_frame``). Frames
    already waiting in the subscriber's buffer when it is written to are joined
    into one chunk (one socket write), up to and including an ending frame.

    If the owner drops this subscriber for falling behind, the stream ends with a
    ``data: {"error": ...}`` frame telling the client to re-read
    the Task and subscribe again. When the stream ends, ``frames`` is closed and
    removed from ``streams`` (the handlers' set of open streams).
    """
    try:
        with frames:
            if first is not None:
                data, ended = _chunk(first, frames, encode_frame, stop_when_interrupted)
                yield data
                if ended:
                    return
            while True:
                frame: StreamResponse | bytes | None = None
                with trio.move_on_after(KEEPALIVE_S if KEEPALIVE_S > 0 else math.inf):
                    frame = await _receive(frames)
                if frame is None:  # KEEPALIVE_S of silence
                    yield sse_comment("keep-alive")
                    continue
                if isinstance(frame, bytes):  # the error frame that ends the stream
                    yield frame
                    return
                data, ended = _chunk(frame, frames, encode_frame, stop_when_interrupted)
                yield data
                if ended:
                    return
    finally:
        if streams is not None:
            streams.discard(frames)


async def _receive(frames: trio.MemoryReceiveChannel[StreamResponse]) -> StreamResponse | bytes:
    """The next frame, or the error frame that ends the stream: ``UNAVAILABLE`` when
    the channel was closed under it (``Handlers.stop()``: shutdown), ``ActorGone`` when
    the owner ended it (the subscriber fell behind, or the owner restarted)."""
    try:
        return await frames.receive()
    except trio.ClosedResourceError:
        stopping = Overloaded(
            "the server is shutting down; read the task with GET "
            "/tasks/{id} and subscribe again once it is back"
        )
        return sse_error_frame(error_body(stopping))
    except trio.EndOfChannel:
        error = ActorGone(
            "this stream was interrupted (it fell behind, or the task's "
            "owner restarted); read the task with GET /tasks/{id}, then "
            "subscribe again"
        )
        return sse_error_frame(error_body(error))


def _chunk(
    frame: StreamResponse,
    frames: trio.MemoryReceiveChannel[StreamResponse],
    encode_frame: FrameEncoder,
    stop_when_interrupted: bool,
) -> tuple[bytes, bool]:
    """``frame``'s bytes plus those of the frames already waiting behind it, and
    whether the stream ends with them. Stops at an ending frame; an empty, ended or
    closed channel is left for the next ``receive`` to report."""
    ended = _ends(frame, stop_when_interrupted)
    data = encode_frame(frame)
    if ended:
        return data, True
    parts = [data]
    while not ended:
        try:
            frame = frames.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
            break
        parts.append(encode_frame(frame))
        ended = _ends(frame, stop_when_interrupted)
    return (data if len(parts) == 1 else b"".join(parts)), ended


def _ends(frame: StreamResponse, stop_when_interrupted: bool) -> bool:
    state = _state(frame)
    return state is not None and (
        state.is_terminal or (stop_when_interrupted and state.is_interrupted)
    )


def _state(frame: StreamResponse) -> TaskState | None:
    if frame.task is not None:
        return frame.task.status.state
    if frame.status_update is not None:
        return frame.status_update.status.state
    return None


async def guarded(
    frames: AsyncGenerator[bytes, None], metrics: Metrics, exchange: Exchange
) -> AsyncIterator[bytes]:
    """Forward SSE bytes; an error after the first frame becomes an error frame.

    Counts the stream in ``taskplane_sse_subscribers`` while it is open and logs
    ``sse_stream_ended`` (route, principal, Task ID, frames, duration) when it ends.
    """
    started = time.perf_counter()
    count = 0
    metrics.sse_subscribers.inc()
    try:
        async with aclosing(frames):  # a client that hangs up closes the inner stream too
            async for chunk in frames:
                count += 1
                yield chunk
    except TaskplaneError as exc:
        yield sse_error_frame(error_body(exc))
    except Exception:
        log.exception("stream failed", extra={"event": "http_stream_failed"})
        yield sse_error_frame(
            error_body(Internal("the stream failed; read the task and resubscribe"))
        )
    finally:
        metrics.sse_subscribers.dec()
        log.info(
            "stream ended",
            extra={
                "event": "sse_stream_ended",
                "route": exchange.route,
                "principal": exchange.principal,
                "taskId": exchange.task_id,
                "frames": count,
                "durationMs": round((time.perf_counter() - started) * 1000, 3),
            },
        )
