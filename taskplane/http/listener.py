"""The A2A listener: accept connections, bound them, and contain each one's failure.

:func:`serve_connections` replaces ``hypercorn.trio.serve`` (whose accept loop is
trio's ``serve_listeners``) and keeps hypercorn's sans-I/O protocols and ASGI
lifespan. Its part of the design rule "No client can stop or hold the server":

* a failure stays with its connection: each connection (:class:`~taskplane.http.
  transport.Connection`) runs in its own task under a boundary that catches any
  ``Exception`` it raises (the protocol's, or one of its request tasks'), closes that
  connection, counts it in ``taskplane_http_connection_failures_total{kind}`` (the
  exception's class) and logs it with its traceback, at most once per
  :data:`REPORT_INTERVAL_S` per kind with the number seen
  (``http_connection_failed``).
  Each request's ASGI call has the same boundary, so an exception out of the app is
  counted and logged the same way (hypercorn then answers 500, or closes). Before,
  such an exception left the listener's nursery and stopped the process.
* connections are bounded: at most ``limits.total`` open connections, and
  ``limits.per_client`` per client address; one past either is answered 503 in the
  A2A shape with ``Retry-After`` and closed at once: the answer's write is bounded
  by :data:`REFUSAL_DEADLINE_S`, what the client already sent is drained without
  waiting, and the socket is closed (a refused connection holds its descriptor for
  no longer than that write). Counted by cap; logged at most once per
  :data:`REPORT_INTERVAL_S` per cap with the number refused
  (``http_connection_refused``).
* descriptor exhaustion backs off: ``accept`` failing with ``EMFILE``, ``ENFILE``,
  ``ENOBUFS`` or ``ENOMEM`` waits (50 ms, doubling to 1 s) and retries; it is logged
  once per :data:`REPORT_INTERVAL_S` with a count and no traceback
  (``http_accept_failed``).
* shutdown: ``shutdown_trigger`` returning stops accepting; idle connections close,
  requests in flight get ``config.graceful_timeout`` seconds.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import AppWrapper, ConnectionState, LifespanState
from hypercorn.utils import wrap_app
from prometheus_client import Counter, Gauge

from taskplane.errors import Overloaded
from taskplane.http.access import OTHER_METHOD, UNMATCHED
from taskplane.http.metrics import Metrics
from taskplane.http.raw_answers import raw_answer
from taskplane.http.transport import Connection

log = logging.getLogger("taskplane.http")

__all__ = [
    "ACCEPT_CAPACITY_ERRNOS",
    "REPORT_INTERVAL_S",
    "ConnectionLimits",
    "ThrottledReport",
    "serve_connections",
]

REPORT_INTERVAL_S = 10.0
"""At most one log line per kind of connection or accept failure in this many seconds."""
ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
"""``accept`` errors that mean "out of descriptors or memory for now": back off, retry."""
ACCEPT_BACKOFF_S = (0.05, 1.0)
"""First and longest wait after an accept capacity error (doubling in between)."""
REFUSAL_DEADLINE_S = 1.0
"""How long the 503 to a refused connection may take to write before it is dropped."""
MAX_REFUSALS_IN_FLIGHT = 64
"""Refused connections being answered at once; past it a refused one is just closed."""
RETRY_AFTER_S = 1
"""``Retry-After`` of the 503 past a connection cap, seconds."""


@attrs.frozen
class ConnectionLimits:
    """Bounds of the listener.

    Attributes:
        total: open connections at once (``TASKPLANE_MAX_CONNECTIONS``, possibly
            lowered to the descriptor budget).
        per_client: open connections of one client address
            (``TASKPLANE_MAX_CONNECTIONS_PER_CLIENT``).
        header_timeout_s: seconds a request's headers may take to arrive.
        http2: serve HTTP/2 too (``TASKPLANE_HTTP2``).
        send_timeout_s: seconds an HTTP/2 answer may wait for flow-control window
            (``TASKPLANE_SEND_TIMEOUT_S``; HTTP/1.1 has ``TCP_USER_TIMEOUT``).
    """

    total: int
    per_client: int
    header_timeout_s: float
    http2: bool = False
    send_timeout_s: float = 60.0


@attrs.define
class ThrottledReport:
    """Log a recurring failure once per ``interval_s`` per kind, with how many
    occurred since the last line.

    ``emit(kind, seen)`` writes the line; ``seen`` counts this occurrence and the
    ones suppressed since the previous line. The kinds are the caller's (a bounded
    set: exception class names, errno names).
    """

    emit: Callable[[str, int], None]
    interval_s: float = REPORT_INTERVAL_S
    _last: dict[str, float] = attrs.field(factory=dict)
    _suppressed: dict[str, int] = attrs.field(factory=dict)

    def report(self, kind: str) -> None:
        now = trio.current_time()
        last = self._last.get(kind)
        if last is not None and now - last < self.interval_s:
            self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
            return
        self._last[kind] = now
        seen = self._suppressed.pop(kind, 0) + 1
        self.emit(kind, seen)


class _Instruments:
    """The listener's metrics, registered in the server's registry."""

    def __init__(self, metrics: Metrics) -> None:
        r = metrics.registry
        self.failures = Counter(
            "taskplane_http_connection_failures",
            "Connections closed because their handling raised, by exception class",
            ["kind"],
            registry=r,
        )
        self.refused = Counter(
            "taskplane_http_connections_refused",
            "Connections answered 503 and closed at a connection cap, by cap",
            ["cap"],
            registry=r,
        )
        self.accept_errors = Counter(
            "taskplane_http_accept_errors",
            "accept() failures from descriptor or memory exhaustion, by errno",
            ["errno"],
            registry=r,
        )
        for cap in ("total", "per_client"):
            self.refused.labels(cap)  # shown at 0 before the first refusal
        for code in sorted(ACCEPT_CAPACITY_ERRNOS):
            self.accept_errors.labels(errno.errorcode[code])
        self.open = Gauge(
            "taskplane_http_connections_open", "Client connections open now", registry=r
        )
        self.edge_answers = metrics.requests


async def serve_connections(
    app: Any,
    config: HypercornConfig,
    listener: trio.socket.SocketType,
    limits: ConnectionLimits,
    metrics: Metrics,
    *,
    shutdown_trigger: Callable[[], Awaitable[None]],
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` (ASGI) on ``listener`` until ``shutdown_trigger`` returns.

    Args:
        config: hypercorn's settings (keep-alive, graceful timeout, h11/h2 sizes).
        listener: a bound, listening trio socket; closed on return.
        limits: the caps and deadlines (:class:`ConnectionLimits`).
        metrics: the server's instruments; the listener adds its own to its registry.

    ``task_status.started([url])`` hands over ``http://host:port``.

    Raises:
        hypercorn's ``LifespanFailureError``: the app's startup failed.
    """
    lifespan_state: LifespanState = {}
    lifespan = Lifespan(wrap_app(app, config.wsgi_max_body_size, "asgi"), config, lifespan_state)
    context = WorkerContext(None)
    accepting = _Accepting(app, config, context, lifespan_state, limits, _Instruments(metrics))
    async with trio.open_nursery() as lifespan_nursery:
        await lifespan_nursery.start(lifespan.handle_lifespan)
        await lifespan.wait_for_startup()
        async with trio.open_nursery() as connections:
            with listener:
                host, port = listener.getsockname()[:2]
                shown = f"[{host}]" if ":" in host else host
                task_status.started([f"http://{shown}:{port}"])
                async with trio.open_nursery() as accept_nursery:
                    accept_nursery.start_soon(accepting.loop, listener, connections)
                    await shutdown_trigger()
                    accept_nursery.cancel_scope.cancel()
            await context.terminated.set()
            connections.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
        await lifespan.wait_for_shutdown()
        lifespan_nursery.cancel_scope.cancel()


class _Accepting:
    """The accept loop and the per-connection boundary (module docstring)."""

    def __init__(
        self,
        app: Any,
        config: HypercornConfig,
        context: WorkerContext,
        state: LifespanState,
        limits: ConnectionLimits,
        instruments: _Instruments,
    ) -> None:
        self._app: AppWrapper = wrap_app(self._contained(app), config.wsgi_max_body_size, "asgi")
        self._config = config
        self._context = context
        self._state = state
        self._limits = limits
        self._instruments = instruments
        self._open = 0
        self._by_client: dict[str, int] = {}
        self._refusing = 0
        self._failures = ThrottledReport(self._log_failure)
        self._accept_errors = ThrottledReport(self._log_accept_error)
        self._refusals = ThrottledReport(self._log_refusal)
        self._last_failure: dict[str, BaseException] = {}

    async def loop(self, listener: trio.socket.SocketType, nursery: trio.Nursery) -> None:
        backoff = ACCEPT_BACKOFF_S[0]
        while True:
            try:
                sock, address = await listener.accept()
            except OSError as exc:
                if exc.errno not in ACCEPT_CAPACITY_ERRNOS:
                    raise
                name = errno.errorcode.get(exc.errno, str(exc.errno))
                self._instruments.accept_errors.labels(name).inc()
                self._accept_errors.report(name)
                await trio.sleep(backoff)
                backoff = min(backoff * 2, ACCEPT_BACKOFF_S[1])
                continue
            backoff = ACCEPT_BACKOFF_S[0]
            client = str(address[0]) if isinstance(address, tuple) else ""
            stream = trio.SocketStream(sock)
            cap = self._cap_reached(client)
            if cap is None:
                self._enter(client)
                nursery.start_soon(self._serve, stream, client)
            else:
                self._instruments.refused.labels(cap).inc()
                self._refusals.report(cap)
                if self._refusing < MAX_REFUSALS_IN_FLIGHT:
                    self._refusing += 1
                    nursery.start_soon(self._refuse, stream, cap)
                else:
                    sock.close()

    def _cap_reached(self, client: str) -> str | None:
        if self._open >= self._limits.total:
            return "total"
        if self._by_client.get(client, 0) >= self._limits.per_client:
            return "per_client"
        return None

    def _enter(self, client: str) -> None:
        self._open += 1
        self._by_client[client] = self._by_client.get(client, 0) + 1
        self._instruments.open.set(self._open)

    def _leave(self, client: str) -> None:
        self._open -= 1
        left = self._by_client[client] - 1
        if left:
            self._by_client[client] = left
        else:
            del self._by_client[client]
        self._instruments.open.set(self._open)

    async def _serve(self, stream: trio.SocketStream, client: str) -> None:
        connection = Connection(
            self._app,
            self._config,
            self._context,
            ConnectionState(self._state.copy()),
            stream,
            header_timeout_s=self._limits.header_timeout_s,
            http2=self._limits.http2,
            answered=self._count_edge_answer,
            send_timeout_s=self._limits.send_timeout_s,
            released=lambda: self._leave(client),
        )
        try:
            await connection.run()
        except Exception as exc:  # the boundary: one connection's failure is its own
            self._contain(exc)
        finally:
            with trio.CancelScope(shield=True):
                await connection.release()

    async def _refuse(self, stream: trio.SocketStream, cap: str) -> None:
        error = Overloaded(
            f"the server holds its maximum of connections ({cap.replace('_', ' ')}); retry later",
            retry_after_s=RETRY_AFTER_S,
        )
        try:
            with trio.move_on_after(REFUSAL_DEADLINE_S):
                await stream.send_all(raw_answer(error))
                await stream.send_eof()
            _drain_ready(stream.socket)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            self._refusing -= 1
            await trio.aclose_forcefully(stream)

    def _contained(self, app: Any) -> Any:
        """``app`` with the same boundary per request: an exception out of the ASGI
        app is contained here (counted, logged once), and hypercorn then answers 500
        if nothing was sent, or closes the connection."""

        async def contained(scope: Any, receive: Any, send: Any) -> None:
            if scope.get("type") == "lifespan":
                await app(scope, receive, send)
                return
            try:
                await app(scope, receive, send)
            except Exception as exc:
                self._contain(exc)

        return contained

    def _contain(self, exc: Exception) -> None:
        kind = _kind_of(exc)
        self._instruments.failures.labels(kind).inc()
        self._last_failure[kind] = exc
        self._failures.report(kind)

    def _count_edge_answer(self, status: int) -> None:
        self._instruments.edge_answers.labels(UNMATCHED, OTHER_METHOD, str(status)).inc()
        log.info(
            "%s %s %d",
            OTHER_METHOD,
            UNMATCHED,
            status,
            extra={
                "event": "http_request",
                "method": OTHER_METHOD,
                "route": UNMATCHED,
                "status": status,
            },
        )

    def _log_failure(self, kind: str, seen: int) -> None:
        exc = self._last_failure.pop(kind, None)
        log.error(
            "a request or connection failed and was closed (%s; %d since the last "
            "report); the server goes on",
            kind,
            seen,
            exc_info=exc,
            extra={"event": "http_connection_failed", "kind": kind, "count": seen},
        )

    def _log_refusal(self, cap: str, seen: int) -> None:
        log.warning(
            "%d connections refused in the last %g s: the %s connection cap is reached",
            seen,
            REPORT_INTERVAL_S,
            cap.replace("_", " "),
            extra={"event": "http_connection_refused", "cap": cap, "count": seen},
        )

    def _log_accept_error(self, name: str, seen: int) -> None:
        log.error(
            "accept failed with %s %d times in the last %g s; backing off (raise the "
            "descriptor limit, or lower TASKPLANE_MAX_CONNECTIONS)",
            name,
            seen,
            REPORT_INTERVAL_S,
            extra={"event": "http_accept_failed", "errno": name, "count": seen},
        )


def _drain_ready(sock: trio.socket.SocketType) -> None:
    """Read and drop what the peer already sent, without waiting (the socket is
    non-blocking), so closing it does not reset the answer just written."""
    for _ in range(16):  # bounded: at most 1 MiB read from a refused client
        try:
            if not os.read(sock.fileno(), 65_536):
                return
        except (BlockingIOError, InterruptedError):
            return


def _kind_of(exc: BaseException) -> str:
    """A bounded label for a failure: the class name of its first leaf exception."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return type(exc).__name__
