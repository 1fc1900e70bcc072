"""Connections close as HTTP/1.1 says, on every route, against the real server.

Each case speaks raw HTTP over a socket to a ``taskplane serve`` process and waits
for the server to close the connection (EOF), bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest
import trio

from tests.e2e.taskplane_proc import RunningServer, Spawner

pytestmark = pytest.mark.slow

KEEP_ALIVE_S = 1
SEND_TIMEOUT_S = 1
TCP_ESTABLISHED = 1
CLOSE_DEADLINE_S = 10.0
"""Upper bound for the server to close a connection it must close."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    spawner = Spawner(tmp_path_factory.mktemp("connections"))
    try:
        yield spawner.serve(
            extra_env={
                "TASKPLANE_KEEP_ALIVE_S": str(KEEP_ALIVE_S),
                "TASKPLANE_SEND_TIMEOUT_S": str(SEND_TIMEOUT_S),
            }
        )
    finally:
        spawner.close()


def _port(server: RunningServer) -> int:
    return int(server.url.rsplit(":", 1)[1])


async def _read_until_closed(stream: trio.SocketStream) -> bytes:
    data = b""
    while chunk := await stream.receive_some(65536):
        data += chunk
    return data


async def _exchange(server: RunningServer, raw: bytes) -> bytes:
    """Send ``raw``; everything the server sent before it closed the connection."""
    with trio.fail_after(CLOSE_DEADLINE_S):
        stream = await trio.open_tcp_stream("127.0.0.1", _port(server))
        async with stream:
            await stream.send_all(raw)
            return await _read_until_closed(stream)


def _request(
    server: RunningServer,
    method: str,
    path: str,
    *,
    version: str = "HTTP/1.1",
    body: bytes = b"",
    close: bool = True,
    token: str | None = None,
) -> bytes:
    lines = [f"{method} {path} {version}", "Host: test", "A2A-Version: 1.0"]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    if close and version == "HTTP/1.1":
        lines.append("Connection: close")
    if body:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _send_body(message_id: str) -> bytes:
    message = {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    return json.dumps({"message": message}).encode()


CASES = [
    ("GET", "/.well-known/agent-card.json", b"", True, b"200"),
    ("GET", "/tasks", b"", True, b"200"),
    ("GET", "/tasks/missing-task", b"", True, b"404"),
    ("POST", "/message:send", _send_body("conn-1"), True, b"200"),
    ("GET", "/tasks", b"", False, b"401"),
    ("GET", "/no/such/route", b"", True, b"404"),
    ("GET", "/healthz", b"", False, b"200"),
    ("GET", "/readyz", b"", False, b"200"),
    ("GET", "/metrics", b"", False, b"200"),
]


@pytest.mark.parametrize(("method", "path", "body", "authenticated", "status"), CASES)
async def test_an_http_1_0_request_without_keep_alive_is_answered_then_closed(
    server: RunningServer, method: str, path: str, body: bytes, authenticated: bool, status: bytes
) -> None:
    body = body.replace(b"conn-1", b"conn-10")
    token = server.token if authenticated else None
    raw = _request(server, method, path, version="HTTP/1.0", body=body, token=token)
    answer = await _exchange(server, raw)
    assert answer.split(b"\r\n", 1)[0].split(b" ")[1] == status, answer[:300]


@pytest.mark.parametrize(("method", "path", "body", "authenticated", "status"), CASES)
async def test_connection_close_is_honoured_on_every_route(
    server: RunningServer, method: str, path: str, body: bytes, authenticated: bool, status: bytes
) -> None:
    body = body.replace(b"conn-1", b"conn-11")
    token = server.token if authenticated else None
    answer = await _exchange(server, _request(server, method, path, body=body, token=token))
    head = answer.split(b"\r\n\r\n", 1)[0].lower()
    assert head.split(b"\r\n", 1)[0].split(b" ")[1] == status, answer[:300]
    assert b"connection: close" in head


async def test_a_keep_alive_connection_serves_again_then_closes_after_the_idle_timeout(
    server: RunningServer,
) -> None:
    request = _request(server, "GET", "/.well-known/agent-card.json", close=False)
    with trio.fail_after(CLOSE_DEADLINE_S):
        stream = await trio.open_tcp_stream("127.0.0.1", _port(server))
        async with stream:
            await stream.send_all(request + request)  # pipelined: both are answered
            data = await _read_until_closed(stream)  # then the idle timeout closes it
    assert data.count(b"HTTP/1.1 200") == 2


async def test_a_connection_that_never_sends_a_request_is_closed_after_the_idle_timeout(
    server: RunningServer,
) -> None:
    assert await _exchange(server, b"") == b""


async def test_head_subscribe_opens_no_subscription_and_a_pipelined_request_is_answered(
    server: RunningServer,
) -> None:
    sent = await _exchange(
        server,
        _request(
            server,
            "POST",
            "/message:send",
            body=_send_body("ask-head").replace(b'"hi"', b'"ask: which?"'),
            token=server.token,
        ),
    )
    task_id = json.loads(sent.split(b"\r\n\r\n", 1)[1])["task"]["id"]
    head = _request(server, "HEAD", f"/tasks/{task_id}:subscribe", close=False, token=server.token)
    get = _request(server, "GET", f"/tasks/{task_id}", token=server.token)
    answer = await _exchange(server, head + get)  # bounded: no subscription holds it
    assert answer.startswith(b"HTTP/1.1 200")
    assert b"text/event-stream" in answer.split(b"\r\n\r\n", 1)[0]
    assert answer.count(b"HTTP/1.1 200") == 2
    assert b"TASK_STATE_INPUT_REQUIRED" in answer


async def _until_not_established(sock: trio.socket.SocketType) -> None:
    """The kernel reports an abort only as the socket's TCP state leaving ESTABLISHED;
    there is no event to wait on, so it is polled (the caller bounds the wait)."""
    while True:
        if sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] != TCP_ESTABLISHED:
            return
        await trio.sleep(0.05)


@pytest.mark.skipif(not hasattr(socket, "TCP_USER_TIMEOUT"), reason="Linux only")
async def test_a_client_that_stops_reading_is_disconnected_after_the_send_timeout(
    server: RunningServer,
) -> None:
    """Pipelined requests whose answers (MBs) a client never reads: its receive window
    stays full, and the server aborts the connection after ``TASKPLANE_SEND_TIMEOUT_S``
    instead of holding it (and its shutdown) forever."""
    request = _request(server, "GET", "/.well-known/agent-card.json", close=False)
    sock = trio.socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    with sock, trio.fail_after(CLOSE_DEADLINE_S + 10):
        await sock.connect(("127.0.0.1", _port(server)))

        async def send_requests() -> None:
            with trio.move_on_after(CLOSE_DEADLINE_S):  # the server may stop reading
                for _ in range(3000):
                    await sock.send(request)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send_requests)
            await _until_not_established(sock)
            nursery.cancel_scope.cancel()
    assert server.process.returncode is None
