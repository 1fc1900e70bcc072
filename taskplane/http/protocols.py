"""Which HTTP the server speaks on a connection: HTTP/1.1, and HTTP/2 only when on.

Hypercorn's own protocol selection switches any cleartext connection to HTTP/2 when
the client sends the HTTP/2 preface (prior knowledge) or ``Upgrade: h2c``, and has no
setting to stop it. :class:`ServedProtocol` is the selection point instead (design
rule "No client can stop or hold the server": HTTP/2 only when the operator turns it
on, ``TASKPLANE_HTTP2``):

* off (the default): :class:`HTTP11Only`. ``Upgrade: h2c`` is ignored and the request
  is served in HTTP/1.1, as RFC 9110 §7.8 lets a server do; the HTTP/2 preface
  (``PRI * HTTP/2.0``) closes the connection without a byte sent.
* on: both switches work, and the HTTP/2 side is :class:`HTTP2`, which keeps a stream
  the server already answered from failing the connection, and resets a stream whose
  answer cannot progress for lack of flow-control window. A connection that switched
  by prior knowledge starts idle, so the keep-alive timeout governs it until its
  first stream (hypercorn's HTTP/1.1 side had marked it busy for the preface).

Both HTTP/1.1 classes refuse a method that is not in upper case with 501 (RFC 9110
§9.1: methods are case-sensitive; hypercorn would upper-case ``post`` into ``POST``),
and ignore empty lines (CR and LF bytes) before a request line, as RFC 9112 §2.2 asks
of a server (h11 answers them with an empty 400).

The classes subclass hypercorn 0.18's sans-I/O protocols (the version is pinned) and
override two of their methods: ``_check_protocol`` (where HTTP/1.1 decides to switch)
and ``_create_stream`` (where the method is upper-cased); ``tests/http`` checks both.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h11
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.events import Closed, Event, RawData, Updated
from hypercorn.protocol.events import StreamClosed
from hypercorn.protocol.h2 import H2Protocol
from hypercorn.protocol.h11 import H2CProtocolRequiredError, H2ProtocolAssumedError, H11Protocol

from taskplane.errors import MethodNotImplemented
from taskplane.http.errors import wire_identity
from taskplane.http.raw_answers import raw_answer

__all__ = ["HTTP2", "EdgeAnswered", "HTTP11Only", "ServedProtocol"]

EdgeAnswered = Callable[[int], None]
"""Called with the status of an answer the protocol layer wrote itself (not the app),
so it is counted like the app's."""


class _PrefaceRefused(Exception):
    """The HTTP/2 preface on a server that speaks HTTP/1.1 only."""


class HTTP11Only(H11Protocol):
    """Hypercorn's HTTP/1.1 protocol that never switches to HTTP/2 and keeps method
    case.

    Args: as :class:`hypercorn.protocol.h11.H11Protocol`, then ``answered`` (see
    :data:`EdgeAnswered`) and ``http2`` (whether the switches to HTTP/2 are allowed).
    """

    def __init__(self, *args: Any, answered: EdgeAnswered, http2: bool) -> None:
        super().__init__(*args)
        self._answered = answered
        self._http2 = http2

    async def handle(self, event: Event) -> None:
        connection = self.connection
        if (
            isinstance(event, RawData)
            and event.data
            and isinstance(connection, h11.Connection)
            and connection.their_state is h11.IDLE
            and not connection.trailing_data[0]
        ):
            data = event.data.lstrip(b"\r\n")  # empty lines before a request line
            if not data:
                return
            event = RawData(data=data)
        await super().handle(event)

    async def _check_protocol(self, event: h11.Request) -> None:
        if self._http2:
            await super()._check_protocol(event)
        elif event.method == b"PRI" and event.target == b"*":
            raise _PrefaceRefused

    async def _create_stream(self, request: h11.Request) -> None:
        if request.method == request.method.upper():
            await super()._create_stream(request)
            return
        error = MethodNotImplemented(
            f"method {request.method.decode('ascii', 'replace')[:32]!r} is not implemented; "
            "methods are case-sensitive"
        )
        await self.send(RawData(data=raw_answer(error)))
        self._answered(wire_identity(error).http_status)
        await self.send(Closed())


class HTTP2(H2Protocol):
    """Hypercorn's HTTP/2 protocol with three repairs:

    * DATA for a stream the server has already answered and closed is dropped (its
      flow-control credit returned) instead of raising ``KeyError`` out of the
      connection (hypercorn 0.18 handles the late ``END_STREAM`` but not late DATA,
      upstream issue 329);
    * when the connection closes, every stream's send buffer is closed too, so an
      answer waiting for a flow-control window the client never opened ends (it
      waited forever, holding the connection after the client left);
    * a stream whose answer has bytes to send but no flow-control window (the client
      set ``INITIAL_WINDOW_SIZE`` to 0, or never sends ``WINDOW_UPDATE``) for
      ``send_timeout_s`` seconds is reset (``RST_STREAM`` with ``CANCEL``) and its
      request ended, as a client that stops reading is aborted after
      ``TASKPLANE_SEND_TIMEOUT_S`` in HTTP/1.1.

    Args: as :class:`hypercorn.protocol.h2.H2Protocol`, then ``send_timeout_s``.
    """

    def __init__(self, *args: Any, send_timeout_s: float) -> None:
        super().__init__(*args)
        self._send_timeout_s = send_timeout_s
        self._stalled_since: dict[int, float] = {}

    @property
    def header_block_open(self) -> bool:
        """A ``HEADERS`` frame arrived without ``END_HEADERS`` and its
        ``CONTINUATION`` frames are still awaited (read from h2's frame buffer)."""
        return bool(getattr(self.connection.incoming_buffer, "_headers_buffer", ()))

    async def _send_data(self, stream_id: int) -> None:
        buffer = self.stream_buffers.get(stream_id)
        if buffer is not None and buffer.buffer:
            try:
                window = self.connection.local_flow_control_window(stream_id)
            except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError, KeyError):
                window = 1  # closed: hypercorn's own path below cleans it up
            if window <= 0:
                if stream_id not in self._stalled_since:
                    self._stalled_since[stream_id] = trio.current_time()
                    self.task_group.spawn(self._watch_stall, stream_id)
            else:
                self._stalled_since.pop(stream_id, None)
        await super()._send_data(stream_id)

    async def _watch_stall(self, stream_id: int) -> None:
        while (since := self._stalled_since.get(stream_id)) is not None:
            if stream_id not in self.stream_buffers:
                del self._stalled_since[stream_id]
                return
            if trio.current_time() >= since + self._send_timeout_s:
                del self._stalled_since[stream_id]
                await self._reset_stalled(stream_id)
                return
            await trio.sleep_until(since + self._send_timeout_s)

    async def _reset_stalled(self, stream_id: int) -> None:
        try:
            self.connection.reset_stream(stream_id, error_code=h2.errors.ErrorCodes.CANCEL)
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
            pass
        await self._flush()
        buffer = self.stream_buffers.get(stream_id)
        if buffer is not None:
            await buffer.close()
        self.priority.unblock(stream_id)
        await self.stream_send(StreamClosed(stream_id=stream_id))

    async def handle(self, event: Event) -> None:
        await super().handle(event)
        if isinstance(event, Closed):
            for buffer in list(self.stream_buffers.values()):
                await buffer.close()

    async def _handle_events(self, events: list[h2.events.Event]) -> None:
        for event in events:
            if isinstance(event, h2.events.DataReceived) and event.stream_id not in self.streams:
                self.connection.acknowledge_received_data(
                    event.flow_controlled_length, event.stream_id
                )
                await self._flush()
            else:
                await super()._handle_events([event])


class ServedProtocol:
    """The protocol of one connection: HTTP/1.1, switching to :class:`HTTP2` only
    when ``http2`` is on.

    Args: as hypercorn's ``ProtocolWrapper`` without ``alpn_protocol`` (the listener is
    cleartext), then ``answered`` (:data:`EdgeAnswered`), ``http2`` and
    ``send_timeout_s`` (seconds an HTTP/2 answer may wait for window, :class:`HTTP2`).
    """

    def __init__(
        self,
        app: Any,
        config: HypercornConfig,
        context: Any,
        task_group: Any,
        state: Any,
        client: tuple[str, int] | None,
        server: tuple[str, int] | None,
        send: Callable[[Event], Awaitable[None]],
        *,
        answered: EdgeAnswered,
        http2: bool,
        send_timeout_s: float = 60.0,
    ) -> None:
        self._parts = (app, config, context, task_group, state, False, client, server, send)
        self._send = send
        self._http2 = http2
        self._send_timeout_s = send_timeout_s
        self.protocol: HTTP11Only | HTTP2 = HTTP11Only(*self._parts, answered=answered, http2=http2)

    @property
    def http11(self) -> h11.Connection | None:
        """The HTTP/1.1 state machine while the connection speaks HTTP/1.1, else
        ``None`` (HTTP/2, or a WebSocket)."""
        if isinstance(self.protocol, HTTP11Only) and isinstance(
            self.protocol.connection, h11.Connection
        ):
            return self.protocol.connection
        return None

    @property
    def http2(self) -> HTTP2 | None:
        """The HTTP/2 protocol once the connection switched to it, else ``None``."""
        return self.protocol if isinstance(self.protocol, HTTP2) else None

    @property
    def exchanging(self) -> bool:
        """A request is in progress on the connection: an HTTP/1.1 request whose
        answer is not yet complete, or an open HTTP/2 stream."""
        if isinstance(self.protocol, HTTP2):
            return bool(self.protocol.streams)
        return self.protocol.stream is not None

    async def initiate(self) -> None:
        await self.protocol.initiate()

    async def handle(self, event: Event) -> None:
        """Feed ``event`` (hypercorn's ``RawData`` or ``Closed``) to the protocol."""
        try:
            await self.protocol.handle(event)
        except _PrefaceRefused:
            await self._send(Closed())
        except H2ProtocolAssumedError as prior_knowledge:
            self.protocol = HTTP2(*self._parts, send_timeout_s=self._send_timeout_s)
            await self.protocol.initiate()
            if prior_knowledge.data:
                await self.protocol.handle(RawData(data=prior_knowledge.data))
            if not self.protocol.streams:
                await self._send(Updated(idle=True))  # the keep-alive timer runs again
        except H2CProtocolRequiredError as upgrade:
            self.protocol = HTTP2(*self._parts, send_timeout_s=self._send_timeout_s)
            await self.protocol.initiate(upgrade.headers, upgrade.settings)
            if upgrade.data:
                await self.protocol.handle(RawData(data=upgrade.data))
