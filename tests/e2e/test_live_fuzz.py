"""Malformed byte streams cannot stop the server or hold its connections (hypothesis).

A real ``taskplane serve`` on 127.0.0.1 gets :data:`HTTP1_EXAMPLES` malformed HTTP/1.1
requests (random bytes, and well-formed requests with parts replaced, repeated,
truncated or joined by the wrong line ends) and, with ``TASKPLANE_HTTP2=1``,
:data:`HTTP2_EXAMPLES` HTTP/2 connections (the preface, then random frames). Each
example is one connection: the bytes, a half-close, then the server must answer in
HTTP/1.1 or close within :data:`ANSWER_DEADLINE_S`. After every :data:`BATCH`
examples a well-formed ``GET /healthz`` must answer 200.

The example counts are fixed and the generation is derandomized, so a CI run is
bounded (about 20 s) and repeatable.
"""

from __future__ import annotations

import http.client
import socket
import struct
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.e2e.taskplane_proc import RunningServer, Spawner

pytestmark = pytest.mark.slow

HTTP1_EXAMPLES = 4_000
HTTP2_EXAMPLES = 1_500
BATCH = 100
ANSWER_DEADLINE_S = 5.0
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def _fuzz(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


@pytest.fixture(scope="module")
def spawner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Spawner]:
    spawner = Spawner(tmp_path_factory.mktemp("fuzz"))
    try:
        yield spawner
    finally:
        spawner.close()


@pytest.fixture(scope="module")
def http1(spawner: Spawner) -> RunningServer:
    return spawner.serve(extra_env={"TASKPLANE_HEADER_TIMEOUT_S": "2"})


@pytest.fixture(scope="module")
def http2(spawner: Spawner) -> RunningServer:
    return spawner.serve(extra_env={"TASKPLANE_HTTP2": "1", "TASKPLANE_HEADER_TIMEOUT_S": "2"})


# --- generation ---------------------------------------------------------------------------

_methods = st.sampled_from(
    [b"GET", b"POST", b"HEAD", b"PUT", b"DELETE", b"OPTIONS", b"PRI", b"post", b"G\x00T", b""]
)
_targets = st.sampled_from(
    [
        b"/healthz",
        b"/message:send",
        b"/tasks",
        b"/tasks/x:subscribe",
        b"/.well-known/agent-card.json",
        b"*",
        b"http://x/tasks",
        b"/%00",
        b"/" + b"a" * 9000,
        b"",
    ]
)
_versions = st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.x", b"HTTP/9", b""])
_header_names = st.sampled_from(
    [
        b"Host",
        b"Content-Length",
        b"Transfer-Encoding",
        b"Connection",
        b"Upgrade",
        b"A2A-Version",
        b"Authorization",
        b"Content-Type",
        b"Expect",
        b"Bad Name",
        b"",
    ]
)
_header_values = st.one_of(
    st.sampled_from(
        [
            b"chunked",
            b"gzip, chunked",
            b"close",
            b"keep-alive",
            b"h2c",
            b"websocket",
            b"100-continue",
            b"1.0",
            b"-1",
            b"99999999999999999999",
            b"Bearer x",
            b"application/json",
        ]
    ),
    st.binary(max_size=40),
)
_line_ends = st.sampled_from([b"\r\n", b"\n", b"\r", b"\r\r\n", b""])


@st.composite
def http1_streams(draw: st.DrawFn) -> bytes:
    """A malformed HTTP/1.1 byte stream: random bytes, or a request with its parts
    drawn from edge values, joined by drawn line ends, maybe truncated."""
    if draw(st.integers(0, 4)) == 0:
        return draw(st.binary(min_size=1, max_size=2000))
    end = draw(_line_ends)
    head = [draw(_methods) + b" " + draw(_targets) + b" " + draw(_versions)]
    for _ in range(draw(st.integers(0, 8))):
        head.append(
            draw(_header_names)
            + draw(st.sampled_from([b": ", b":", b" : "]))
            + draw(_header_values)
        )
    body = draw(st.binary(max_size=300))
    if draw(st.booleans()):
        body = b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"
    stream = end.join(head) + end + draw(_line_ends) + body
    if draw(st.booleans()):
        stream = stream[: draw(st.integers(0, len(stream)))]
    return stream


def _frame(kind: int, flags: int, stream_id: int, payload: bytes) -> bytes:
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes([kind, flags])
        + struct.pack(">I", stream_id)
        + payload
    )


@st.composite
def http2_streams(draw: st.DrawFn) -> bytes:
    """The HTTP/2 preface and a SETTINGS frame, then random frames (any type, flags,
    stream, payload), or random bytes."""
    stream = PREFACE + _frame(4, 0, 0, b"")
    if draw(st.integers(0, 4)) == 0:
        return stream + draw(st.binary(max_size=2000))
    for _ in range(draw(st.integers(1, 8))):
        stream += _frame(
            draw(st.integers(0, 10)),
            draw(st.integers(0, 255)),
            draw(st.sampled_from([0, 1, 3, 5, 2, 2**31 - 1])),
            draw(st.binary(max_size=200)),
        )
    return stream


# --- running --------------------------------------------------------------------------------


def _port(server: RunningServer) -> int:
    return int(server.url.rsplit(":", 1)[1])


def _throw(server: RunningServer, data: bytes) -> bytes:
    """Send ``data``, half-close, and read until the server closes (bounded)."""
    with socket.create_connection(("127.0.0.1", _port(server)), timeout=ANSWER_DEADLINE_S) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        except ConnectionResetError:
            return b""  # the server closed with our bytes unread: a close is an answer
    return answer


def _assert_serving(server: RunningServer) -> None:
    assert server.process.returncode is None, server.process.describe()
    conn = http.client.HTTPConnection("127.0.0.1", _port(server), timeout=ANSWER_DEADLINE_S)
    try:
        conn.request("GET", "/healthz")
        assert conn.getresponse().status == 200
    finally:
        conn.close()


def test_malformed_http1_streams_never_stop_the_server(http1: RunningServer) -> None:
    thrown = 0

    @_fuzz(HTTP1_EXAMPLES)
    @given(http1_streams())
    def throw(data: bytes) -> None:
        nonlocal thrown
        answer = _throw(http1, data)
        assert answer == b"" or answer.startswith(b"HTTP/1.1 "), answer[:100]
        thrown += 1
        if thrown % BATCH == 0:
            _assert_serving(http1)

    throw()
    print(f"HTTP/1.1: {thrown} streams thrown")
    assert thrown >= HTTP1_EXAMPLES
    _assert_serving(http1)
    assert "Traceback" not in http1.process.stderr()


def test_malformed_http2_streams_never_stop_the_server(http2: RunningServer) -> None:
    thrown = 0

    @_fuzz(HTTP2_EXAMPLES)
    @given(http2_streams())
    def throw(data: bytes) -> None:
        nonlocal thrown
        _throw(http2, data)
        thrown += 1
        if thrown % BATCH == 0:
            _assert_serving(http2)

    throw()
    print(f"HTTP/2: {thrown} streams thrown")
    assert thrown >= HTTP2_EXAMPLES
    _assert_serving(http2)
