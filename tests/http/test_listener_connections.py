"""A connection's life against a real listener on 127.0.0.1: a half-closed request is
still answered, refused connections are released at once and logged once per
interval, and HTTP/2 connections have deadlines.

The listener (:func:`taskplane.http.listener.serve_connections`) serves a small ASGI
app whose answer waits on a gate the test opens, so "the client's FIN arrived while
its request was in progress" is an order, not a race.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
from collections.abc import AsyncIterator, Callable
from typing import Any

import attrs
import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings
import hpack
import pytest
import trio
import trio.testing
from hypercorn.config import Config as HypercornConfig
from hyperframe.frame import HeadersFrame

from taskplane.http.access import AccessLog
from taskplane.http.listener import ConnectionLimits, serve_connections
from taskplane.http.metrics import Metrics

pytestmark = pytest.mark.slow

DEADLINE_S = 10.0
REQUEST = b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi"


@attrs.define
class Gate:
    """The app's answer waits until the test opens the gate."""

    opened: trio.Event = attrs.field(factory=trio.Event)
    waiting: int = 0


def gated_app(gate: Gate) -> Callable[..., Any]:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        while (await receive()).get("more_body", False):
            pass
        gate.waiting += 1
        await gate.opened.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok", "more_body": False})

    return app


@attrs.frozen
class Served:
    port: int
    metrics: Metrics
    gate: Gate


async def _serve(
    nursery: trio.Nursery,
    limits: ConnectionLimits,
    *,
    keep_alive_s: float = 3600,
) -> Served:
    gate = Gate()
    metrics = Metrics()
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    config = HypercornConfig()
    config.accesslog = None
    config.graceful_timeout = 1.0
    config.keep_alive_timeout = keep_alive_s
    stop = trio.Event()
    nursery.start_soon(
        lambda: serve_connections(
            AccessLog(gated_app(gate), metrics),
            config,
            listener,
            limits,
            metrics,
            shutdown_trigger=stop.wait,
        )
    )
    await trio.testing.wait_all_tasks_blocked()
    return Served(listener.getsockname()[1], metrics, gate)


@pytest.fixture
async def served(nursery: trio.Nursery) -> AsyncIterator[Served]:
    yield await _serve(nursery, ConnectionLimits(total=64, per_client=64, header_timeout_s=5))


async def _read_until_closed(stream: trio.SocketStream) -> bytes:
    data = b""
    while chunk := await stream.receive_some(65536):
        data += chunk
    return data


def _samples(metrics: Metrics, family_name: str) -> dict[tuple[str, ...], float]:
    found: dict[tuple[str, ...], float] = {}
    for family in metrics.registry.collect():
        if family.name == family_name:
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    found[tuple(sample.labels.values())] = sample.value
    return found


# --- a half-closed request is answered ----------------------------------------------------------


async def test_a_request_whose_client_half_closes_is_still_answered_then_closed(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    with trio.fail_after(DEADLINE_S), caplog.at_level(logging.INFO, logger="taskplane.http"):
        async with await trio.open_tcp_stream("127.0.0.1", served.port) as stream:
            await stream.send_all(REQUEST)
            await stream.send_eof()  # shutdown(SHUT_WR), as nc -N and socat do
            await trio.testing.wait_all_tasks_blocked()  # the FIN is in, the app waits
            assert served.gate.waiting == 1
            served.gate.opened.set()
            answer = await _read_until_closed(stream)
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert answer.endswith(b"2\r\nok\r\n0\r\n\r\n")
    logged = [r for r in caplog.records if r.__dict__.get("event") == "http_request"]
    assert [r.__dict__["status"] for r in logged] == [200]


async def test_a_request_whose_client_resets_is_still_logged_and_counted(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    with trio.fail_after(DEADLINE_S), caplog.at_level(logging.INFO, logger="taskplane.http"):
        stream = await trio.open_tcp_stream("127.0.0.1", served.port)
        await stream.send_all(REQUEST)
        await trio.testing.wait_all_tasks_blocked()
        assert served.gate.waiting == 1
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await stream.aclose()  # a reset: the client is gone
        await trio.testing.wait_all_tasks_blocked()
        served.gate.opened.set()  # the answer's write fails
        await trio.testing.wait_all_tasks_blocked()
    logged = [r for r in caplog.records if r.__dict__.get("event") == "http_request"]
    assert [r.__dict__["status"] for r in logged] == [499]
    assert logged[0].__dict__["reason"] == "CLIENT_CLOSED_REQUEST"
    counted = _samples(served.metrics, "taskplane_http_requests")
    assert counted == {("(unmatched)", "POST", "499"): 1}


async def test_empty_lines_before_a_request_line_are_ignored(served: Served) -> None:
    served.gate.opened.set()
    with trio.fail_after(DEADLINE_S):
        async with await trio.open_tcp_stream("127.0.0.1", served.port) as stream:
            await stream.send_all(b"\r\n")  # RFC 9112 §2.2: a stray CRLF first
            await trio.testing.wait_all_tasks_blocked()
            closing = REQUEST.replace(b"Host: t\r\n", b"Host: t\r\nConnection: close\r\n")
            await stream.send_all(b"\r\n" + closing)
            answer = await _read_until_closed(stream)
    assert answer.startswith(b"HTTP/1.1 200"), answer


# --- refused connections ------------------------------------------------------------------------


def _descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_refused_connections_are_closed_at_once_and_logged_once_per_interval(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    served = await _serve(nursery, ConnectionLimits(total=1, per_client=64, header_timeout_s=5))
    refused = _samples(served.metrics, "taskplane_http_connections_refused")
    assert refused == {("total",): 0, ("per_client",): 0}  # present before the first
    with trio.fail_after(DEADLINE_S), caplog.at_level(logging.INFO, logger="taskplane.http"):
        async with await trio.open_tcp_stream("127.0.0.1", served.port) as holder:
            await trio.testing.wait_all_tasks_blocked()  # it holds the one slot
            baseline = _descriptors()
            clients = []
            for _ in range(20):
                client = await trio.open_tcp_stream("127.0.0.1", served.port)
                clients.append(client)
                await client.send_all(b"GET /x HTTP/1.1\r\nHost: t\r\n\r\n")
                answer = await _read_until_closed(client)
                assert answer.startswith(b"HTTP/1.1 503"), answer
            await trio.testing.wait_all_tasks_blocked()
            # the clients keep their sockets open; the server holds none of them
            assert _descriptors() == baseline + len(clients)
            for client in clients:
                await client.aclose()
            del holder
    refusals = [r for r in caplog.records if r.__dict__.get("event") == "http_connection_refused"]
    assert [(r.__dict__["cap"], r.__dict__["count"]) for r in refusals] == [("total", 1)]
    assert _samples(served.metrics, "taskplane_http_connections_refused")[("total",)] == 20


# --- HTTP/2 deadlines -------------------------------------------------------------------------

SHORT_S = 0.3
"""The deadline under test (keep-alive, header or send timeout), seconds."""


async def _h2_client(
    served: Served, settings: dict[int, int] | None = None
) -> tuple[trio.SocketStream, h2.connection.H2Connection]:
    """A connection past the preface, with the server's SETTINGS acknowledged."""
    stream = await trio.open_tcp_stream("127.0.0.1", served.port)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    if settings:
        conn.update_settings(settings)
    await stream.send_all(conn.data_to_send())
    changed = False
    while not changed:
        data = await stream.receive_some(65536)
        assert data, "closed before its SETTINGS"
        changed = any(
            isinstance(e, h2.events.RemoteSettingsChanged) for e in conn.receive_data(data)
        )
    await stream.send_all(conn.data_to_send())
    return stream, conn


async def _h2_until_closed(
    stream: trio.SocketStream, conn: h2.connection.H2Connection
) -> list[h2.events.Event]:
    """Every event the server sent until it closed the connection (nothing sent back)."""
    seen: list[h2.events.Event] = []
    while data := await stream.receive_some(65536):
        seen += conn.receive_data(data)
    return seen


def _h2_limits(**overrides: float) -> ConnectionLimits:
    values: dict[str, Any] = {"header_timeout_s": 3600, "send_timeout_s": 3600, **overrides}
    return ConnectionLimits(total=64, per_client=64, http2=True, **values)


async def test_an_http2_connection_with_no_stream_is_closed_after_the_keep_alive(
    nursery: trio.Nursery,
) -> None:
    served = await _serve(nursery, _h2_limits(), keep_alive_s=SHORT_S)
    with trio.fail_after(DEADLINE_S):
        stream, conn = await _h2_client(served)  # the preface and SETTINGS, then nothing
        async with stream:
            await _h2_until_closed(stream, conn)


async def test_an_unfinished_http2_header_block_gets_goaway_after_the_header_deadline(
    nursery: trio.Nursery,
) -> None:
    served = await _serve(nursery, _h2_limits(header_timeout_s=SHORT_S))
    with trio.fail_after(DEADLINE_S):
        stream, conn = await _h2_client(served)
        async with stream:
            block = hpack.Encoder().encode(
                [(":method", "GET"), (":path", "/x"), (":scheme", "http"), (":authority", "t")]
            )
            frame = HeadersFrame(1, data=block, flags=["END_STREAM"])  # no END_HEADERS
            await stream.send_all(frame.serialize())
            seen = await _h2_until_closed(stream, conn)
    assert any(isinstance(e, h2.events.ConnectionTerminated) for e in seen), seen


async def test_an_http2_answer_with_no_window_is_reset_after_the_send_timeout(
    nursery: trio.Nursery,
) -> None:
    served = await _serve(nursery, _h2_limits(send_timeout_s=SHORT_S))
    served.gate.opened.set()
    window = h2.settings.SettingCodes.INITIAL_WINDOW_SIZE
    with trio.fail_after(DEADLINE_S):
        stream, conn = await _h2_client(served, {window: 0})
        async with stream:
            conn.send_headers(
                1,
                [(":method", "GET"), (":path", "/x"), (":scheme", "http"), (":authority", "t")],
                end_stream=True,
            )
            await stream.send_all(conn.data_to_send())
            reset: h2.events.StreamReset | None = None
            while reset is None:
                data = await stream.receive_some(65536)
                assert data, "closed before the stream was reset"
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.StreamReset):
                        reset = event
                await stream.send_all(conn.data_to_send())
    assert reset.stream_id == 1
    assert reset.error_code == h2.errors.ErrorCodes.CANCEL
