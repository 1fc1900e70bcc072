"""A server under a 256-descriptor limit answers through 2,000 short-lived connections.

``taskplane serve`` runs with ``RLIMIT_NOFILE`` 256 (soft and hard: nothing to raise),
so its connection cap is lowered to 256 - 64. Clients then open 2,000 connections in
waves of 100 at once, in the three ways ordinary clients end them: a request and a
close of the idle keep-alive connection, a connect-then-close, and an HTTP/1.0
request. After every wave ``/healthz`` answers, and the server's descriptors return to
what they were. A burst of 300 connections held open at once (past the cap and past
the descriptor limit) gets 200s and A2A 503s, never a reset or a hang, and the log
holds no traceback.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator

import pytest
import trio

from tests.e2e.taskplane_proc import RunningServer, Spawner

pytestmark = pytest.mark.slow

DESCRIPTOR_LIMIT = 256
CONNECTIONS = 2_000
WAVE = 100
BURST = 300
ANSWER_DEADLINE_S = 10.0
RELEASE_DEADLINE_S = 5.0
POLL_S = 0.05

GET = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
GET_1_0 = b"GET /healthz HTTP/1.0\r\nHost: x\r\n\r\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    spawner = Spawner(tmp_path_factory.mktemp("descriptors"))
    try:
        yield spawner.serve(
            extra_env={"TASKPLANE_KEEP_ALIVE_S": "120"}, descriptor_limit=DESCRIPTOR_LIMIT
        )
    finally:
        spawner.close()


def _port(server: RunningServer) -> int:
    return int(server.url.rsplit(":", 1)[1])


def _descriptors(server: RunningServer) -> int:
    return len(os.listdir(f"/proc/{server.process.pid}/fd"))


async def _head(stream: trio.SocketStream) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(65536)
        if not chunk:
            break
        data += chunk
    return data


async def _short_lived(server: RunningServer, kind: int) -> None:
    stream = await trio.open_tcp_stream("127.0.0.1", _port(server))
    async with stream:
        if kind == 0:  # a request, then the client closes the idle connection
            await stream.send_all(GET)
            assert (await _head(stream)).startswith(b"HTTP/1.1 200")
        elif kind == 2:  # HTTP/1.0: the server closes after the answer
            await stream.send_all(GET_1_0)
            assert (await _head(stream)).startswith(b"HTTP/1.1 200")
        # kind 1: connect, then close


async def _polled(done: Callable[[], bool]) -> bool:
    """Poll ``done`` (another process's descriptors give no event) for at most
    :data:`RELEASE_DEADLINE_S`; its last value."""
    for _ in range(int(RELEASE_DEADLINE_S / POLL_S)):
        if done():
            return True
        await trio.sleep(POLL_S)
    return done()


async def _healthz(server: RunningServer) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", _port(server))
    async with stream:
        await stream.send_all(GET)
        return await _head(stream)


async def test_2000_short_lived_connections_under_a_256_descriptor_limit(
    server: RunningServer,
) -> None:
    baseline = _descriptors(server)
    started = time.monotonic()
    highest = baseline
    for wave in range(CONNECTIONS // WAVE):
        with trio.fail_after(ANSWER_DEADLINE_S):
            async with trio.open_nursery() as nursery:
                for i in range(WAVE):
                    nursery.start_soon(_short_lived, server, (wave + i) % 3)
            assert (await _healthz(server)).startswith(b"HTTP/1.1 200")
        highest = max(highest, _descriptors(server))
    elapsed = time.monotonic() - started
    assert await _polled(lambda: _descriptors(server) <= baseline)
    assert highest < DESCRIPTOR_LIMIT
    assert server.process.returncode is None
    print(f"{CONNECTIONS} connections in {elapsed:.1f} s; descriptors {baseline}..{highest}")


async def test_a_burst_past_the_cap_and_the_limit_gets_answers_never_resets(
    server: RunningServer,
) -> None:
    statuses: list[bytes] = []
    held: list[trio.SocketStream] = []
    with trio.fail_after(ANSWER_DEADLINE_S * 3):

        async def one() -> None:
            stream = await trio.open_tcp_stream("127.0.0.1", _port(server))
            held.append(stream)
            await stream.send_all(GET)
            statuses.append((await _head(stream))[9:12])

        async with trio.open_nursery() as nursery:
            for _ in range(BURST):
                nursery.start_soon(one)
        assert set(statuses) <= {b"200", b"503"}
        assert statuses.count(b"503") >= BURST - (DESCRIPTOR_LIMIT - 64)
        for stream in held:
            await stream.aclose()
        assert (await _healthz(server)).startswith((b"HTTP/1.1 200", b"HTTP/1.1 503"))
        assert await _polled(lambda: _descriptors(server) <= DESCRIPTOR_LIMIT - 64)
        assert (await _healthz(server)).startswith(b"HTTP/1.1 200")
    assert "Traceback" not in server.process.stderr()
    assert server.process.returncode is None
