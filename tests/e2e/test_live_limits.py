"""Connections are released and bounded, and HTTP/1.1 is framed as RFC 9112/9110 say,
against the real server.

Each case speaks raw bytes over a blocking socket (every read bounded by a timeout)
to a ``taskplane serve`` process with a long keep-alive (so "released at once" cannot
be the keep-alive timer) and short header/body deadlines. Descriptors are counted in
``/proc/<pid>/fd``.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import time
from collections.abc import Iterator

import pytest

from tests.e2e.taskplane_proc import RunningServer, Spawner

pytestmark = pytest.mark.slow

KEEP_ALIVE_S = 120
HEADER_TIMEOUT_S = 1
BODY_TIMEOUT_S = 1
PER_CLIENT = 6
READ_TIMEOUT_S = 10.0
"""Upper bound for any one answer or close the tests wait for."""
RELEASE_DEADLINE_S = 5.0
"""Upper bound for the server to release descriptors after its peers closed."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    spawner = Spawner(tmp_path_factory.mktemp("limits"))
    try:
        yield spawner.serve(
            extra_env={
                "TASKPLANE_KEEP_ALIVE_S": str(KEEP_ALIVE_S),
                "TASKPLANE_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S),
                "TASKPLANE_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S),
                "TASKPLANE_MAX_CONNECTIONS_PER_CLIENT": str(PER_CLIENT),
            }
        )
    finally:
        spawner.close()


def _port(server: RunningServer) -> int:
    return int(server.url.rsplit(":", 1)[1])


def _connect(server: RunningServer) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", _port(server)), timeout=READ_TIMEOUT_S)
    return sock


def _read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _descriptors(server: RunningServer) -> int:
    return len(os.listdir(f"/proc/{server.process.pid}/fd"))


def _until_descriptors_at_most(server: RunningServer, limit: int) -> int:
    """Poll the server's descriptor count until it is at most ``limit`` (the kernel
    gives no event for another process's descriptors); the count when it was, or the
    last count at the deadline."""
    deadline = time.monotonic() + RELEASE_DEADLINE_S
    while (count := _descriptors(server)) > limit and time.monotonic() < deadline:
        time.sleep(0.05)
    return count


def _until_logged(server: RunningServer, route: str) -> list[dict[str, object]]:
    """Poll the server's log (another process's output, written off its request path)
    until it holds an ``http_request`` line for ``route``; those lines, or none at the
    deadline."""
    deadline = time.monotonic() + RELEASE_DEADLINE_S
    while True:
        logged = [
            e
            for e in server.process.log_events()
            if e.get("event") == "http_request" and e.get("route") == route
        ]
        if logged or time.monotonic() > deadline:
            return logged
        time.sleep(0.05)


def _healthz(server: RunningServer) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", _port(server), timeout=READ_TIMEOUT_S)
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status
    finally:
        conn.close()


def _status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def _error(answer: bytes) -> dict[str, object]:
    error: dict[str, object] = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
    return error


# --- a peer's close releases its connection ------------------------------------------------


def test_closed_keep_alive_and_connect_then_close_connections_are_released_at_once(
    server: RunningServer,
) -> None:
    assert _healthz(server) == 200
    baseline = _descriptors(server)
    for _ in range(40):
        conn = http.client.HTTPConnection("127.0.0.1", _port(server), timeout=READ_TIMEOUT_S)
        conn.request("GET", "/healthz")
        assert conn.getresponse().read() is not None
        conn.close()  # an idle keep-alive connection, closed by the client
    for _ in range(40):
        socket.create_connection(("127.0.0.1", _port(server)), timeout=READ_TIMEOUT_S).close()
    assert _until_descriptors_at_most(server, baseline) <= baseline


@pytest.mark.parametrize("shape", ["list", "send"])
def test_a_half_closed_request_is_answered_and_logged(server: RunningServer, shape: str) -> None:
    auth = f"Authorization: Bearer {server.token}\r\nA2A-Version: 1.0\r\n"
    if shape == "list":
        request = f"GET /tasks HTTP/1.1\r\nHost: x\r\n{auth}\r\n".encode()
    else:
        body = (
            b'{"message": {"messageId": "half-closed-1", "role": "ROLE_USER", '
            b'"parts": [{"text": "hi"}]}}'
        )
        request = (
            f"POST /message:send HTTP/1.1\r\nHost: x\r\n{auth}"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode() + body
    # from its own loopback address: connections another test closed may still wait
    # in the accept queue, holding 127.0.0.1's per-client slots for a moment
    with socket.create_connection(
        ("127.0.0.1", _port(server)), timeout=READ_TIMEOUT_S, source_address=("127.0.0.2", 0)
    ) as sock:
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)  # what nc -N and socat do: a FIN, not an abort
        answer = _read_until_closed(sock)
    assert _status(answer) == 200, answer
    route = "/tasks" if shape == "list" else "/message:send"
    assert [e["status"] for e in _until_logged(server, route)][-1:] == [200]


# --- deadlines ---------------------------------------------------------------------------------


def test_headers_trickled_past_the_header_deadline_get_408_and_a_close(
    server: RunningServer,
) -> None:
    with _connect(server) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # never the blank line
        started = time.monotonic()
        answer = _read_until_closed(sock)
    assert _status(answer) == 408
    assert _error(answer)["code"] == 408
    assert time.monotonic() - started < HEADER_TIMEOUT_S + 3


def test_a_body_that_stops_arriving_gets_408_in_the_a2a_shape_and_a_close(
    server: RunningServer,
) -> None:
    head = (
        "POST /message:send HTTP/1.1\r\nHost: x\r\nA2A-Version: 1.0\r\n"
        f"Authorization: Bearer {server.token}\r\n"
        "Content-Type: application/json\r\nContent-Length: 500\r\n\r\n"
    )
    with _connect(server) as sock:
        sock.sendall(head.encode() + b'{"message": ')
        answer = _read_until_closed(sock)
    assert _status(answer) == 408
    assert b"connection: close" in answer.split(b"\r\n\r\n", 1)[0].lower()
    assert _error(answer)["details"][0]["reason"] == "REQUEST_TIMEOUT"  # type: ignore[index]


# --- caps --------------------------------------------------------------------------------------


def test_a_connection_past_the_per_client_cap_gets_the_a2a_503_with_retry_after(
    server: RunningServer,
) -> None:
    held = [_connect(server) for _ in range(PER_CLIENT)]
    try:
        for sock in held:  # each is accepted and served (keeps its slot)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        with _connect(server) as extra:
            answer = _read_until_closed(extra)
        head = answer.split(b"\r\n\r\n", 1)[0].lower()
        assert _status(answer) == 503
        assert b"retry-after: 1" in head
        assert _error(answer)["status"] == "UNAVAILABLE"
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + RELEASE_DEADLINE_S
    while _healthz_or_503(server) != 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _healthz(server) == 200


def _healthz_or_503(server: RunningServer) -> int:
    try:
        return _healthz(server)
    except (ConnectionError, http.client.HTTPException):
        return 503


# --- HTTP/1.1 framing ----------------------------------------------------------------------------


def test_content_length_with_transfer_encoding_is_answered_then_closed(
    server: RunningServer,
) -> None:
    request = (
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    )
    with _connect(server) as sock:
        sock.sendall(request)
        answer = _read_until_closed(sock)  # closed by the server, not the keep-alive
    assert _status(answer) == 200
    assert b"connection: close" in answer.split(b"\r\n\r\n", 1)[0].lower()


def test_a_lower_case_method_is_not_implemented(server: RunningServer) -> None:
    body = b'{"message": {"messageId": "lower-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}'
    request = (
        b"post /message:send HTTP/1.1\r\nHost: x\r\nA2A-Version: 1.0\r\n"
        + f"Authorization: Bearer {server.token}\r\n".encode()
        + b"Content-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    with _connect(server) as sock:
        sock.sendall(request)
        answer = _read_until_closed(sock)
    assert _status(answer) == 501
    assert _error(answer)["details"][0]["reason"] == "METHOD_NOT_IMPLEMENTED"  # type: ignore[index]


def test_repeated_a2a_version_lines_are_one_joined_value(server: RunningServer) -> None:
    request = (
        b"GET /tasks HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        + f"Authorization: Bearer {server.token}\r\n".encode()
        + b"A2A-Version: 1.0\r\nA2A-Version: 2.0\r\n\r\n"
    )
    with _connect(server) as sock:
        sock.sendall(request)
        answer = _read_until_closed(sock)
    assert _status(answer) == 400
    assert _error(answer)["details"][0]["reason"] == "VERSION_NOT_SUPPORTED"  # type: ignore[index]


# --- HTTP/2 is off unless turned on -------------------------------------------------------------


def test_the_http2_preface_gets_no_http2_when_it_is_off(server: RunningServer) -> None:
    with _connect(server) as sock:
        sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        answer = _read_until_closed(sock)
    assert answer == b""  # closed cleanly, no SETTINGS frame
    assert _healthz(server) == 200


def test_an_h2c_upgrade_is_served_in_http_1_1_when_http2_is_off(server: RunningServer) -> None:
    request = (
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings, close\r\n"
        b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n"
    )
    with _connect(server) as sock:
        sock.sendall(request)
        answer = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
