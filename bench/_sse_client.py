"""A lean SSE subscriber swarm for ``sse_fanout.py``: one ``select.epoll`` loop over
raw non-blocking sockets per client process.

Why not an async client: on a 2-core machine the client shares the CPU with the
server, and a trio+h11 client costs tens of microseconds per frame per subscriber
(a task wake-up, h11's parser, bytes splitting), so 1,000 subscribers cost the
client tens of ms per update, which lands in the measured spread. Here the loop
does only what the measurement needs while updates are flowing: ``epoll.poll``,
``recv``, ``time.monotonic()`` and an append of ``(arrival, bytes)``; the HTTP/1.1
response (chunked body) and the SSE frames are decoded with h11 *after* the round,
each frame stamped with the arrival of the read that completed it.

A stream is counted as open once its first SSE frame (the ``{"task"}`` snapshot) is
in, and as finished when its socket closes or its chunked body ends
(``0\\r\\n\\r\\n``; every SSE frame ends in ``\\n\\n``, so no data chunk ends so).
"""

from __future__ import annotations

import json
import resource
import select
import socket
import time
from multiprocessing.connection import Connection
from typing import Any

import h11

END_OF_BODY = b"0\r\n\r\n"
Row = tuple[int | None, str | None, bool, bool, list[tuple[str, float]]]
"""(HTTP status, error, opened, ended at a terminal status, [(label, arrival s)])."""


class Stream:
    """One subscriber socket and what it read (raw, with arrival times)."""

    __slots__ = ("error", "finished", "head", "opened", "reads", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reads: list[tuple[float, bytes]] = []
        self.head = b""  # bytes read until the stream counts as open
        self.opened = False
        self.finished = False
        self.error: str | None = None

    def check_open(self, data: bytes) -> None:
        self.head += data
        end = self.head.find(b"\r\n\r\n")
        if end < 0:
            return
        if not self.head.startswith(b"HTTP/1.1 200"):
            self.opened = True  # refused: counted, decoded after the round
            return
        if b"\n\n" in self.head[end + 4 :] or not data:
            self.opened = True


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def label_of(frame: dict[str, Any], terminal: frozenset[str]) -> tuple[str, bool]:
    """A short label for a StreamResponse frame, and whether it ends the stream."""
    if "statusUpdate" in frame:
        state = frame["statusUpdate"]["status"]["state"]
        return "status:" + state.removeprefix("TASK_STATE_"), state in terminal
    if "artifactUpdate" in frame:
        return "artifact", False
    if "task" in frame:
        state = frame["task"]["status"]["state"]
        return "task:" + state.removeprefix("TASK_STATE_"), state in terminal
    if "error" in frame:
        return "error:" + str(frame["error"].get("status")), True
    return "other", False


def decode(stream: Stream, request: h11.Request, terminal: frozenset[str]) -> Row:
    """Decode what ``stream`` read: status, error, opened, done, [(label, arrival)].

    The first frame (the snapshot) is not listed: only its arrival opened the stream.
    """
    conn = h11.Connection(h11.CLIENT)
    conn.send(request)
    conn.send(h11.EndOfMessage())
    status: int | None = None
    error = stream.error
    done = False
    seen_first = False
    frames: list[tuple[str, float]] = []
    buf = b""
    body = b""
    ended = False
    try:
        for at, data in stream.reads:
            conn.receive_data(data)
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA or event is h11.PAUSED:
                    break
                if isinstance(event, h11.Response):
                    status = event.status_code
                elif isinstance(event, h11.Data):
                    if status != 200:
                        body += bytes(event.data)
                        continue
                    buf += bytes(event.data)
                    while b"\n\n" in buf:
                        raw, buf = buf.split(b"\n\n", 1)
                        for line in raw.split(b"\n"):
                            if not line.startswith(b"data:"):
                                continue  # comments (keep-alives), "event: error"
                            label, last = label_of(json.loads(line[5:].lstrip()), terminal)
                            if not seen_first:
                                seen_first = True
                            else:
                                frames.append((label, at))
                            if last:
                                done = not label.startswith("error")
                                if label.startswith("error"):
                                    error = label
                elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                    ended = True
                    break
            if ended:
                break
    except h11.ProtocolError as exc:
        error = f"ProtocolError: {exc}"[:200]
    if error is None:
        if status != 200:
            error = f"HTTP {status}: {body[:160]!r}"
        elif not ended:
            error = "stream did not end (round timed out)"
        elif not done:
            error = "stream ended before a terminal status"
    return status, error, seen_first or stream.opened, done and error is None, frames


def pump(
    poller: select.epoll,
    streams: dict[int, Stream],
    until: float,
    *,
    opening: bool,
    left: int,
) -> int:
    """Read ready sockets until ``left`` more streams count as open (``opening``) or
    finished, or until monotonic time ``until``; returns how many are still left."""
    poll = poller.poll
    mono = time.monotonic
    while left > 0 and mono() < until:
        for fd, _ in poll(0.05):
            stream = streams[fd]
            try:
                data = stream.sock.recv(262144)
            except BlockingIOError:
                continue
            except OSError as exc:
                stream.error = f"{type(exc).__name__}: {exc}"[:200]
                data = b""
            now = mono()
            stream.reads.append((now, data))
            if opening:
                if not data:
                    poller.unregister(fd)
                    stream.finished = True
                    stream.opened, was_open = True, stream.opened
                    left -= 0 if was_open else 1
                    continue
                if not stream.opened:
                    stream.check_open(data)
                    if stream.opened:
                        left -= 1
                continue
            if not data or data.endswith(END_OF_BODY):
                if not stream.finished:
                    stream.finished = True
                    left -= 1
                if not data:
                    poller.unregister(fd)
    return left


def client_process(
    host: str,
    port: int,
    token: str,
    task_id: str,
    n: int,
    parallel: int,
    open_timeout: float,
    round_timeout: float,
    terminal: frozenset[str],
    pipe: Connection,
) -> None:
    """``n`` subscribers (at most ``parallel`` not yet open at once); says "opened"
    over ``pipe`` when all are open, then sends (rows, timed out, cpu s while
    reading updates) once all have finished or ``round_timeout`` passed."""
    target = f"/tasks/{task_id}:subscribe"
    headers = [
        ("Host", f"{host}:{port}"),
        ("Authorization", f"Bearer {token}"),
        ("Accept", "text/event-stream"),
    ]
    request = h11.Request(method="GET", target=target, headers=headers)
    wire = h11.Connection(h11.CLIENT).send(request)
    assert wire is not None
    poller = select.epoll()
    streams: dict[int, Stream] = {}
    order: list[Stream] = []
    deadline = time.monotonic() + open_timeout
    for _ in range(n):
        waiting = sum(1 for s in order if not s.opened)
        while waiting >= parallel and time.monotonic() < deadline:
            pump(poller, streams, deadline, opening=True, left=1)
            waiting = sum(1 for s in order if not s.opened)
        stream = Stream(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
        order.append(stream)
        try:
            stream.sock.connect((host, port))
            stream.sock.sendall(wire)
        except OSError as exc:
            stream.error = f"{type(exc).__name__}: {exc}"[:200]
            stream.opened = stream.finished = True
            continue
        stream.sock.setblocking(False)
        streams[stream.sock.fileno()] = stream
        poller.register(stream.sock.fileno(), select.EPOLLIN)
    while any(not s.opened for s in order) and time.monotonic() < deadline:
        pump(poller, streams, deadline, opening=True, left=1)
    for stream in order:
        if not stream.opened:
            stream.error = stream.error or "not open before --open-timeout"
        if stream.error is not None or not stream.head.startswith(b"HTTP/1.1 200"):
            stream.finished = True
    pipe.send("opened")
    cpu0 = cpu_s()
    left = sum(1 for s in order if not s.finished)
    left = pump(poller, streams, time.monotonic() + round_timeout, opening=False, left=left)
    cpu = cpu_s() - cpu0
    rows = [decode(s, request, terminal) for s in order]
    for stream in order:
        stream.sock.close()
    poller.close()
    pipe.send((rows, left > 0, cpu))
