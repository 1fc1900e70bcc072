"""HTTP/2, when the operator turns it on (``TASKPLANE_HTTP2=1``), cannot stop the server.

The ``h2`` package is the client, over a blocking socket (every read bounded). The
cases are the early answer of upstream hypercorn issue 329 (HEADERS announcing a
2,000,000-byte body without ``END_STREAM``, the 401, then DATA frames) and its
relatives: the stream reset after the early answer, DATA after ``END_STREAM``, and a
client that never opens its receive window. After each, the same connection and a
new one are still served, and the process still runs.
"""

from __future__ import annotations

import http.client
import os
import socket
import time
from collections.abc import Iterator

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import pytest
from hyperframe.frame import DataFrame

from tests.e2e.taskplane_proc import RunningServer, Spawner

pytestmark = pytest.mark.slow

READ_TIMEOUT_S = 10.0
RELEASE_DEADLINE_S = 5.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    spawner = Spawner(tmp_path_factory.mktemp("http2"))
    try:
        yield spawner.serve(extra_env={"TASKPLANE_HTTP2": "1", "TASKPLANE_KEEP_ALIVE_S": "120"})
    finally:
        spawner.close()


class Client:
    """One HTTP/2 prior-knowledge connection driven by ``h2``."""

    def __init__(self, server: RunningServer, settings: dict[int, int] | None = None) -> None:
        port = int(server.url.rsplit(":", 1)[1])
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT_S)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.statuses: dict[int, int] = {}
        self.bodies: dict[int, bytes] = {}
        self.ended: set[int] = set()
        self.conn.initiate_connection()
        if settings:
            self.conn.update_settings(settings)
        self.flush()

    def flush(self) -> None:
        self.sock.sendall(self.conn.data_to_send())

    def headers(self, method: str, path: str, *extra: tuple[str, str], end: bool) -> int:
        stream_id: int = self.conn.get_next_available_stream_id()
        self.conn.send_headers(
            stream_id,
            [
                (":method", method),
                (":path", path),
                (":scheme", "http"),
                (":authority", "127.0.0.1"),
                ("a2a-version", "1.0"),
                *extra,
            ],
            end_stream=end,
        )
        self.flush()
        return stream_id

    def receive(self) -> None:
        """Read once from the socket and take in the events (statuses, bodies, ends)."""
        data = self.sock.recv(65536)
        assert data, "the server closed the connection"
        for event in self.conn.receive_data(data):
            stream_id = getattr(event, "stream_id", None)
            if isinstance(event, h2.events.ResponseReceived):
                self.statuses[event.stream_id] = int(dict(event.headers)[b":status"])
            elif isinstance(event, h2.events.DataReceived):
                self.bodies[event.stream_id] = self.bodies.get(event.stream_id, b"") + event.data
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
                assert stream_id is not None
                self.ended.add(stream_id)
        self.flush()

    def answer(self, stream_id: int) -> tuple[int, bytes]:
        """Read until ``stream_id`` ends (or is reset); its status and body."""
        while stream_id not in self.ended:
            self.receive()
        return self.statuses.get(stream_id, 0), self.bodies.get(stream_id, b"")

    def get(self, path: str) -> int:
        return self.answer(self.headers("GET", path, end=True))[0]

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def client(server: RunningServer) -> Iterator[Client]:
    c = Client(server)
    try:
        yield c
    finally:
        c.close()


def _still_serving(server: RunningServer) -> None:
    assert server.process.returncode is None, server.process.describe()
    conn = http.client.HTTPConnection("127.0.0.1", int(server.url.rsplit(":", 1)[1]), timeout=10)
    try:
        conn.request("GET", "/healthz")
        assert conn.getresponse().status == 200
    finally:
        conn.close()


def _early_answer(client: Client) -> int:
    stream_id = client.headers(
        "POST",
        "/message:send",
        ("content-type", "application/json"),
        ("content-length", "2000000"),
        end=False,
    )
    status, _ = client.answer(stream_id)
    assert status == 401
    return stream_id


def test_data_after_an_early_answer_does_not_stop_the_server(
    server: RunningServer, client: Client
) -> None:
    stream_id = _early_answer(client)
    for _ in range(2):
        client.conn.send_data(stream_id, b"x" * 16_384)
        client.flush()
    assert client.get("/healthz") == 200  # the same connection goes on
    _still_serving(server)


def test_a_reset_after_an_early_answer_does_not_stop_the_server(
    server: RunningServer, client: Client
) -> None:
    stream_id = _early_answer(client)
    client.conn.reset_stream(stream_id)
    client.flush()
    assert client.get("/healthz") == 200
    _still_serving(server)


def test_data_after_end_stream_does_not_stop_the_server(
    server: RunningServer, client: Client
) -> None:
    stream_id = client.headers("GET", "/healthz", end=True)
    assert client.answer(stream_id)[0] == 200
    late = DataFrame(stream_id, data=b"late")
    late.flags.add("END_STREAM")
    client.sock.sendall(late.serialize())  # h2 itself would refuse to send it
    _still_serving(server)


def test_a_window_never_opened_holds_nothing_once_the_client_leaves(
    server: RunningServer,
) -> None:
    baseline = len(os.listdir(f"/proc/{server.process.pid}/fd"))
    stuck = Client(server, {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
    stuck.headers("GET", "/.well-known/agent-card.json", end=True)
    _still_serving(server)  # the stalled answer blocks no one else
    stuck.close()
    deadline = time.monotonic() + RELEASE_DEADLINE_S
    while len(os.listdir(f"/proc/{server.process.pid}/fd")) > baseline:
        assert time.monotonic() < deadline, "the stalled connection was not released"
        time.sleep(0.05)
    _still_serving(server)


def _send_body(client: Client, stream_id: int, size: int) -> None:
    """Send ``size`` bytes of DATA within the flow-control windows the server opens,
    ending the stream; stop early once the server has answered the stream."""
    sent = 0
    while sent < size and stream_id not in client.ended:
        window = min(
            client.conn.local_flow_control_window(stream_id), client.conn.max_outbound_frame_size
        )
        if window <= 0:
            client.receive()
            continue
        chunk = min(window, size - sent)
        try:
            client.conn.send_data(stream_id, b"x" * chunk, end_stream=sent + chunk == size)
        except h2.exceptions.StreamClosedError:
            return
        client.flush()
        sent += chunk


def test_three_oversized_uploads_with_a_token_get_413_and_the_server_goes_on(
    server: RunningServer,
) -> None:
    size = 1_200_000
    for _ in range(3):
        client = Client(server)
        try:
            stream_id = client.headers(
                "POST",
                "/message:send",
                ("authorization", f"Bearer {server.token}"),
                ("content-type", "application/json"),
                ("content-length", str(size)),
                end=False,
            )
            _send_body(client, stream_id, size)
            assert client.answer(stream_id)[0] == 413
        finally:
            client.close()
        _still_serving(server)
