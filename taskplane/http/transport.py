"""One accepted connection, from its first byte to its release.

:class:`Connection` drives hypercorn's sans-I/O protocols
(:class:`~taskplane.http.protocols.ServedProtocol`) over a trio socket stream, in
place of hypercorn's own per-connection server, for
the design rule "No client can stop or hold the server":

* a peer's close releases its connection: when the client closes (FIN, or a reset)
  with no request in progress (an idle keep-alive connection, connect-then-close),
  the connection's tasks are cancelled and its descriptor closed at once. Hypercorn
  0.18 kept the keep-alive timer's task running in the connection's nursery, so a
  closed socket sat in ``CLOSE-WAIT`` until ``TASKPLANE_KEEP_ALIVE_S`` ran out.
* a half-closed request is still answered: a FIN after a complete request is the
  client's end of sending, not an abort (RFC 9112 §9.6; ``nc -N`` and ``socat`` do
  it). The requests in progress run to their answers, which are written, then the
  connection is closed. Only a client whose socket write fails (a reset) is gone
  at once; its requests are cancelled.
* headers arrive in bounded time: from the first byte of an HTTP/1.1 request, its
  whole header section must arrive within ``header_timeout_s``; past it the client
  gets a 408 in the A2A shape and the connection is closed (a byte-a-minute trickle
  holds nothing). An idle connection (no byte of a next request) is governed by the
  keep-alive timeout instead. In HTTP/2 the same deadline runs from a ``HEADERS``
  frame without ``END_HEADERS`` until its last ``CONTINUATION``; past it the
  connection gets ``GOAWAY`` and is closed.
* an idle connection is closed after ``keep_alive_s`` and at shutdown, as hypercorn
  does.

:meth:`Connection.run` raises what the protocol or the app's tasks raised; the
listener (:mod:`taskplane.http.listener`) contains it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import h2.errors
import h11
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.events import Closed, Event, RawData, Updated
from hypercorn.trio.task_group import TaskGroup
from hypercorn.trio.worker_context import TrioSingleTask, WorkerContext
from hypercorn.typing import AppWrapper, ConnectionState

from taskplane.errors import RequestTimeout
from taskplane.http.errors import wire_identity
from taskplane.http.protocols import EdgeAnswered, ServedProtocol
from taskplane.http.raw_answers import raw_answer

__all__ = ["MAX_RECEIVE_BYTES", "Connection"]

MAX_RECEIVE_BYTES = 65_536
"""Bytes read from the socket at a time."""


class Connection:
    """One client connection served until either side closes it.

    Args:
        app: the ASGI app, wrapped for hypercorn (``hypercorn.utils.wrap_app``).
        config: hypercorn's settings (``keep_alive_timeout`` is the idle timeout, s).
        context: the server's hypercorn worker context (its ``terminated`` event is
            shutdown).
        state: the lifespan state copied into each request's scope.
        stream: the accepted socket stream; closed when :meth:`run` returns.
        header_timeout_s: seconds a header section (HTTP/1.1) or header block
            (HTTP/2) may take to arrive.
        http2: serve HTTP/2 as well (``TASKPLANE_HTTP2``).
        send_timeout_s: seconds an HTTP/2 answer may wait for flow-control window
            before its stream is reset (``TASKPLANE_SEND_TIMEOUT_S``).
        answered: counts answers the protocol layer writes itself.
        released: called once, just before the socket's descriptor is closed (the
            listener frees the connection's cap slot there, so a slot is held
            exactly as long as its descriptor).
    """

    def __init__(
        self,
        app: AppWrapper,
        config: HypercornConfig,
        context: WorkerContext,
        state: ConnectionState,
        stream: trio.SocketStream,
        *,
        header_timeout_s: float,
        http2: bool,
        answered: EdgeAnswered,
        send_timeout_s: float = 60.0,
        released: Callable[[], None] = lambda: None,
    ) -> None:
        self._app = app
        self._config = config
        self._context = context
        self._state = state
        self._stream = stream
        self._header_timeout_s = header_timeout_s
        self._http2 = http2
        self._answered = answered
        self._send_timeout_s = send_timeout_s
        self._released = released
        self._slot_held = True
        self._send_lock = trio.Lock()
        self._idle = TrioSingleTask()
        self._header_deadline = math.inf
        self._peer_done = False
        self._gone = trio.Event()
        self._group: TaskGroup
        self._protocol: ServedProtocol

    async def run(self) -> None:
        """Serve the connection until it is closed, then close the socket.

        Raises:
            Exception: whatever the protocol or one of the connection's tasks (the
                app's request tasks, the HTTP/2 sender) raised, as an exception group
                when it came from a task.
        """
        sock = self._stream.socket
        try:
            client = _address(sock.getpeername())
            server = _address(sock.getsockname())
        except OSError:
            await self.release()
            return
        try:
            with trio.CancelScope() as scope:
                async with TaskGroup() as group:
                    self._group = group
                    self._protocol = ServedProtocol(
                        self._app,
                        self._config,
                        self._context,
                        group,
                        ConnectionState(self._state),
                        client,
                        server,
                        self._protocol_send,
                        answered=self._answered,
                        http2=self._http2,
                        send_timeout_s=self._send_timeout_s,
                    )
                    await self._protocol.initiate()
                    await self._idle.restart(group, self._idle_timeout)
                    await self._read()
                    scope.cancel()  # the peer is gone: nothing of it is kept
        except OSError:
            pass
        finally:
            with trio.CancelScope(shield=True):
                await self._close()

    async def _read(self) -> None:
        while True:
            try:
                with trio.move_on_at(self._header_deadline) as waited:
                    data = await self._stream.receive_some(MAX_RECEIVE_BYTES)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                break
            if waited.cancelled_caught:
                await self._headers_too_slow()
                return
            if not data and self._protocol.exchanging:
                await self._finish_half_closed()
                return
            await self._protocol.handle(RawData(bytes(data)))
            if not data:
                break
            self._track_header_section()
        await self._protocol.handle(Closed())

    async def _finish_half_closed(self) -> None:
        """The client sent its FIN with requests in progress: tell the protocol no
        more bytes come, and wait until the answers are written and the protocol
        closes the connection (or a write fails, or the idle timer closes it)."""
        self._peer_done = True
        await self._protocol.handle(RawData(b""))
        if self._protocol.exchanging:
            await self._gone.wait()

    def _track_header_section(self) -> None:
        """Start the header deadline at a next request's first byte (HTTP/1.1) or
        at a header block left open (HTTP/2); clear it once the headers are in."""
        http11 = self._protocol.http11
        http2 = self._protocol.http2
        waiting = (
            http11 is not None and http11.their_state is h11.IDLE and bool(http11.trailing_data[0])
        ) or (http2 is not None and http2.header_block_open)
        if not waiting:
            self._header_deadline = math.inf
        elif self._header_deadline == math.inf:
            self._header_deadline = trio.current_time() + self._header_timeout_s

    async def _headers_too_slow(self) -> None:
        http2 = self._protocol.http2
        if http2 is not None:
            http2.connection.close_connection(
                error_code=h2.errors.ErrorCodes.NO_ERROR,
                additional_data=b"the header block did not arrive in time",
            )
            await self._protocol_send(RawData(data=http2.connection.data_to_send()))
            await self._protocol.handle(Closed())
            return
        error = RequestTimeout(
            f"the request headers did not arrive within {self._header_timeout_s:g} s"
        )
        await self._protocol_send(RawData(data=raw_answer(error)))
        self._answered(wire_identity(error).http_status)
        await self._protocol.handle(Closed())

    async def _protocol_send(self, event: Event) -> None:
        if isinstance(event, RawData):
            async with self._send_lock:
                try:
                    with trio.CancelScope(shield=True):
                        await self._stream.send_all(event.data)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    self._gone.set()  # the client is gone: a reset, or a failed write
                    await self._protocol.handle(Closed())
        elif isinstance(event, Closed):
            await self._close()
            await self._protocol.handle(Closed())
        elif isinstance(event, Updated):
            if event.idle and self._peer_done:
                self._gone.set()  # every answer of a half-closed client is written
            elif event.idle:
                await self._idle.restart(self._group, self._idle_timeout)
            else:
                await self._idle.stop()

    async def _close(self) -> None:
        self._gone.set()
        try:
            await self._stream.send_eof()
        except (trio.BrokenResourceError, trio.BusyResourceError, trio.ClosedResourceError):
            pass  # already gone, or a send is in progress: the close below ends it
        except OSError:
            pass
        await self.release()

    async def release(self) -> None:
        """Free the cap slot (``released``), then close the descriptor; idempotent,
        and what the listener calls last whatever :meth:`run` did."""
        if self._slot_held:
            self._slot_held = False
            self._released()
        await self._stream.aclose()

    async def _idle_timeout(self) -> None:
        with trio.move_on_after(self._config.keep_alive_timeout):
            await self._context.terminated.wait()
        with trio.CancelScope(shield=True):
            self._gone.set()
            await self._protocol.handle(Closed())
            await self.release()


def _address(raw: Any) -> tuple[str, int] | None:
    """``(host, port)`` of a socket address tuple (IPv4 or IPv6), else ``None``."""
    if isinstance(raw, tuple) and len(raw) >= 2:
        return str(raw[0]), int(raw[1])
    return None
