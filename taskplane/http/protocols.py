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
  the server already answered from failing the connection.

Both HTTP/1.1 classes refuse a method that is not in upper case with 501 (RFC 9110
§9.1: methods are case-sensitive; hypercorn would upper-case ``post`` into ``POST``).

The classes subclass hypercorn 0.18's sans-I/O protocols (the version is pinned) and
override two of their methods: ``_check_protocol`` (where HTTP/1.1 decides to switch)
and ``_create_stream`` (where the method is upper-cased); ``tests/http`` checks both.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import h2.events
import h11
from hypercorn.config import Config as HypercornConfig
from hypercorn.events import Closed, Event, RawData
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
    """Hypercorn's HTTP/2 protocol with two repairs:

    * DATA for a stream the server has already answered and closed is dropped (its
      flow-control credit returned) instead of raising ``KeyError`` out of the
      connection (hypercorn 0.18 handles the late ``END_STREAM`` but not late DATA,
      upstream issue 329);
    * when the connection closes, every stream's send buffer is closed too, so an
      answer waiting for a flow-control window the client never opened ends (it
      waited forever, holding the connection after the client left).
    """

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
    cleartext), then ``answered`` (:data:`EdgeAnswered`) and ``http2``.
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
    ) -> None:
        self._parts = (app, config, context, task_group, state, False, client, server, send)
        self._send = send
        self._http2 = http2
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
            self.protocol = HTTP2(*self._parts)
            await self.protocol.initiate()
            if prior_knowledge.data:
                await self.protocol.handle(RawData(data=prior_knowledge.data))
        except H2CProtocolRequiredError as upgrade:
            self.protocol = HTTP2(*self._parts)
            await self.protocol.initiate(upgrade.headers, upgrade.settings)
            if upgrade.data:
                await self.protocol.handle(RawData(data=upgrade.data))
