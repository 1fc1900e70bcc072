"""Helpers shared by the acceptance tests (no fixtures here: each module defines its own).

- :func:`assert_error`: the §11.6 error body (PYTHON-MAPPING decision 5).
- :func:`store_view` / :func:`assert_new_work`: "nothing was recorded" checks.
- :func:`sse_frames`, :func:`read_stream`: SSE ``data:`` frames as JSON objects.
- :func:`wait_for_state`: bounded polling of ``GET /tasks/{id}`` over a real socket.
- :func:`serve`: a second, independent server (own store root, own plane, own app).
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import aclosing, asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio

from taskplane.actors.plane import TaskPlane
from taskplane.app import PlaneOptions, open_plane
from taskplane.bridge.manifest import parse_manifest
from taskplane.extensions import ELICITATION_URI, OUTFITTER_TASK_URI
from taskplane.http.card import agent_card_json
from taskplane.http.compat03 import card as compat03_card
from taskplane.http.handlers import Handlers
from taskplane.server import edge_app
from tests.support.plane import (
    ALPHA_TOKEN,
    BLOCKING_TIMEOUT_S,
    MANIFEST,
    PUBLIC_URL,
    auth,
    credentials,
    send_body,
)

ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST_TYPE = "type.googleapis.com/google.rpc.BadRequest"
A2A_DOMAIN = "a2a-protocol.org"

SUBMITTED = "TASK_STATE_SUBMITTED"
WORKING = "TASK_STATE_WORKING"
COMPLETED = "TASK_STATE_COMPLETED"
CANCELED = "TASK_STATE_CANCELED"
REJECTED = "TASK_STATE_REJECTED"
INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
AUTH_REQUIRED = "TASK_STATE_AUTH_REQUIRED"
TERMINAL = frozenset({COMPLETED, CANCELED, REJECTED, "TASK_STATE_FAILED"})

IMMEDIATE = {"returnImmediately": True}
STREAM_DEADLINE_S = 15.0


# --- errors ------------------------------------------------------------------------------


def assert_error(
    response: httpx.Response,
    status: int,
    reason: str | None = None,
    *,
    media_type: str = "application/json",
) -> dict[str, Any]:
    """Assert ``response`` is a §11.6 error with HTTP ``status`` (and ErrorInfo ``reason``).

    Returns the ``error`` object.
    """
    assert response.status_code == status, response.text
    content_type = response.headers.get("content-type", "")
    assert content_type.split(";")[0].strip() == media_type, content_type
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert error["code"] == status, error
    assert isinstance(error["status"], str) and error["status"], error
    assert isinstance(error["message"], str) and error["message"], error
    details = error["details"]
    assert isinstance(details, list) and details, error
    for detail in details:
        assert "@type" in detail, detail
    info = details[0]
    assert info["@type"] == ERROR_INFO_TYPE, info
    assert info["domain"] == A2A_DOMAIN, info
    assert isinstance(info["reason"], str) and info["reason"], info
    for key, value in info.get("metadata", {}).items():
        assert isinstance(key, str) and isinstance(value, str), info
    if reason is not None:
        assert info["reason"] == reason, info
    return error


def field_violations(error: dict[str, Any]) -> list[str]:
    """The ``field`` of every ``google.rpc.BadRequest`` violation in ``error``."""
    return [
        violation["field"]
        for detail in error["details"]
        if detail.get("@type") == BAD_REQUEST_TYPE
        for violation in detail["fieldViolations"]
    ]


# --- store views -------------------------------------------------------------------------


async def store_view(client: httpx.AsyncClient, prefix: str = "") -> dict[str, Any]:
    """Everything the caller can see in the store: every Task with history and artifacts.

    ``prefix`` is a tenant route prefix such as ``"/acme"``.
    """
    response = await client.get(
        f"{prefix}/tasks", params={"pageSize": "100", "includeArtifacts": "true"}
    )
    assert response.status_code == 200, response.text
    view: dict[str, Any] = response.json()
    return view


def task_ids(view: dict[str, Any]) -> set[str]:
    return {task["id"] for task in view["tasks"]}


async def send(
    client: httpx.AsyncClient,
    text: str,
    message_id: str,
    *,
    prefix: str = "",
    **extra: Any,
) -> httpx.Response:
    """``POST {prefix}/message:send`` with a user text message."""
    return await client.post(f"{prefix}/message:send", json=send_body(text, message_id, **extra))


async def send_task(
    client: httpx.AsyncClient, text: str, message_id: str, **extra: Any
) -> dict[str, Any]:
    """Send and return the Task (asserting 200 and a Task answer)."""
    response = await send(client, text, message_id, **extra)
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"task"}, body
    task: dict[str, Any] = body["task"]
    return task


async def get_task(client: httpx.AsyncClient, task_id: str, prefix: str = "") -> dict[str, Any]:
    response = await client.get(f"{prefix}/tasks/{task_id}")
    assert response.status_code == 200, response.text
    task: dict[str, Any] = response.json()
    return task


async def assert_new_work(
    client: httpx.AsyncClient,
    message_id: str,
    before: dict[str, Any],
    *,
    text: str = "new work after a refusal",
    prefix: str = "",
    immediately: bool = False,
) -> dict[str, Any]:
    """A send reusing ``message_id`` (no taskId) is accepted as NEW work.

    Had the refused request been recorded as an idempotent outcome, this send would get
    that outcome back (or 409 for a different payload). Asserts a fresh Task was created
    next to the ``before`` view, and returns it.
    """
    extra: dict[str, Any] = {"configuration": IMMEDIATE} if immediately else {}
    response = await send(client, text, message_id, prefix=prefix, **extra)
    assert response.status_code == 200, response.text
    task: dict[str, Any] = response.json()["task"]
    assert task["id"] not in task_ids(before)
    assert task["history"][0]["messageId"] == message_id
    after = await store_view(client, prefix)
    assert after["totalSize"] == before["totalSize"] + 1
    assert task_ids(after) == task_ids(before) | {task["id"]}
    return task


# --- SSE -----------------------------------------------------------------------------------


async def sse_frames(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """Each ``data:`` line of an SSE response, parsed (comment lines skipped).

    A caller that stops early must close it (``contextlib.aclosing``), or use
    :func:`take_frames`.
    """
    async with aclosing(response.aiter_lines()) as lines:
        async for line in lines:
            if line.startswith("data:"):
                frame: dict[str, Any] = json.loads(line[len("data:") :].strip())
                yield frame


class RawStream:
    """An SSE response read straight off a TCP socket (HTTP/1.1, chunked or not).

    httpx cannot abandon a stream half-way without leaking its nested async generators
    (a ResourceWarning, which this suite turns into an error), so a test that *drops*
    a connection on purpose reads it with this instead.
    """

    def __init__(self, stream: trio.SocketStream) -> None:
        self._stream = stream
        self._buffer = bytearray()
        self._text = ""
        self._chunked = False
        self._eof = False
        self.status = 0
        self.headers: dict[str, str] = {}

    async def _fill(self) -> bool:
        data = await self._stream.receive_some(65536)
        if not data:
            return False
        self._buffer += data
        return True

    async def _until(self, separator: bytes) -> bytes:
        while (at := self._buffer.find(separator)) < 0:
            if not await self._fill():
                raise EOFError("connection closed")
        out = bytes(self._buffer[:at])
        del self._buffer[: at + len(separator)]
        return out

    async def _exactly(self, count: int) -> bytes:
        while len(self._buffer) < count:
            if not await self._fill():
                raise EOFError("connection closed")
        out = bytes(self._buffer[:count])
        del self._buffer[:count]
        return out

    async def read_head(self) -> None:
        lines = (await self._until(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        for line in lines[1:]:
            name, _, value = line.partition(":")
            self.headers[name.strip().lower()] = value.strip()
        self._chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()

    async def _more_text(self) -> bool:
        if self._eof:
            return False
        if self._chunked:
            size = int((await self._until(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                self._eof = True
                return False
            self._text += (await self._exactly(size)).decode()
            await self._until(b"\r\n")
            return True
        if self._buffer or await self._fill():
            self._text += bytes(self._buffer).decode()
            self._buffer.clear()
            return True
        self._eof = True
        return False

    async def next_frame(self) -> dict[str, Any] | None:
        """The next ``data:`` frame, or ``None`` when the server ended the stream."""
        while True:
            while "\n\n" not in self._text:
                if not await self._more_text():
                    return None
            event, _, self._text = self._text.partition("\n\n")
            for line in event.split("\n"):
                if line.startswith("data:"):
                    frame: dict[str, Any] = json.loads(line[len("data:") :].strip())
                    return frame

    async def take(self, count: int) -> list[dict[str, Any]]:
        """The next ``count`` frames (bounded by a deadline)."""
        frames: list[dict[str, Any]] = []
        with trio.fail_after(STREAM_DEADLINE_S):
            while len(frames) < count:
                frame = await self.next_frame()
                assert frame is not None, f"stream ended after {frames}"
                frames.append(frame)
        return frames


@asynccontextmanager
async def raw_stream(
    base_url: httpx.URL,
    method: str,
    path: str,
    *,
    headers: dict[str, str],
    body: bytes | None = None,
) -> AsyncIterator[RawStream]:
    """Open ``method path`` on the live server; leaving the block drops the connection."""
    host, port = base_url.host, base_url.port
    assert port is not None
    socket = await trio.open_tcp_stream(host, port)
    async with socket:
        lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", "Connection: close"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        request = ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")
        await socket.send_all(request)
        raw = RawStream(socket)
        with trio.fail_after(STREAM_DEADLINE_S):
            await raw.read_head()
        yield raw


async def read_stream(response: httpx.Response) -> list[dict[str, Any]]:
    """Every frame until the server ends the stream (bounded by a deadline)."""
    with trio.fail_after(STREAM_DEADLINE_S):
        return [frame async for frame in sse_frames(response)]


def frame_kind(frame: dict[str, Any]) -> str:
    """The StreamResponse oneof member of ``frame`` (exactly one is allowed)."""
    assert len(frame) == 1, frame
    (kind,) = frame
    assert kind in {"task", "message", "statusUpdate", "artifactUpdate"}, frame
    return kind


def frame_state(frame: dict[str, Any]) -> str | None:
    """The TaskState a frame reports, if it reports one."""
    if "task" in frame:
        state: str = frame["task"]["status"]["state"]
        return state
    if "statusUpdate" in frame:
        state = frame["statusUpdate"]["status"]["state"]
        return state
    return None


def states_of(frames: Iterable[dict[str, Any]]) -> list[str]:
    return [state for state in map(frame_state, frames) if state is not None]


async def wait_for_state(
    client: httpx.AsyncClient, task_id: str, states: Iterable[str], timeout_s: float = 10.0
) -> dict[str, Any]:
    """Poll ``GET /tasks/{id}`` until its state is one of ``states`` (socket tests only)."""
    wanted = frozenset(states)
    with trio.fail_after(timeout_s):
        while True:
            task = await get_task(client, task_id)
            if task["status"]["state"] in wanted:
                return task
            await trio.sleep(0.01)


# --- independent servers -------------------------------------------------------------------


def ticking_clock(step_ms: int = 1) -> Callable[[], int]:
    """A wall clock that advances ``step_ms`` on every reading (strictly increasing)."""
    counter = itertools.count(time.time_ns() // 1_000_000, step_ms)
    return lambda: next(counter)


@attrs.frozen
class Server:
    plane: TaskPlane
    app: Any
    client: httpx.AsyncClient


@asynccontextmanager
async def serve(
    store_root: Path,
    *,
    options: PlaneOptions | None = None,
    blocking_timeout_s: float = BLOCKING_TIMEOUT_S,
    token: str = ALPHA_TOKEN,
    compat03: bool = False,
) -> AsyncIterator[Server]:
    """An in-process server over its own store root, built like the conftest fixtures
    (``compat03``: with ``TASKPLANE_A2A_COMPAT=0.3``)."""
    outputs = parse_manifest(MANIFEST, None, where="tests")
    async with open_plane(
        store_root, public_url=PUBLIC_URL, outputs=outputs, options=options or PlaneOptions()
    ) as plane:
        card = agent_card_json(
            public_url=PUBLIC_URL, name="test-agent", description="tests", version="1.2.3"
        )
        if compat03:
            card = compat03_card(card)
        app = edge_app(
            Handlers(plane, blocking_timeout_s=blocking_timeout_s),
            credentials(),
            card,
            supported_extensions=(ELICITATION_URI, OUTFITTER_TASK_URI),
            compat03=compat03,
        )
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://test", headers=auth(token)
        ) as client:
            yield Server(plane, app, client)
